"""Child process for the partitioning test: records numbered events until told to stop.

Usage: python steady_child.py URL JOURNAL_DIR PROGRESS_FILE STOP_FILE
Event i has event_id record_child.event_id(i). Every 10 events it flushes, then
stores how many are in the database in the 8-byte PROGRESS_FILE. Once STOP_FILE
exists it flushes, stores the final count and exits 0 (1 if a flush timed out).
"""

from __future__ import annotations

import datetime as dt
import mmap
import struct
import sys
from decimal import Decimal
from pathlib import Path

from ledger.events import UsageEvent
from ledger.store.ledger import Ledger
from tests.store.record_child import event_id


def main() -> None:
    url, journal_dir, progress, stop = (
        sys.argv[1],
        Path(sys.argv[2]),
        sys.argv[3],
        Path(sys.argv[4]),
    )
    with open(progress, "r+b") as f:
        done = mmap.mmap(f.fileno(), 8)
    led = Ledger(url, journal_dir=journal_dir, batch_size=10, flush_interval_s=0.01)
    i = 0
    ok = True
    while ok and not stop.exists():
        for _ in range(10):
            led.record(
                UsageEvent(
                    event_id=event_id(i),
                    started_at=dt.datetime.now(dt.UTC),
                    requested_provider="openrouter",
                    requested_model="deepseek/deepseek-chat",
                    provider="openrouter",
                    status="ok",
                    input_tokens=100,
                    output_tokens=10,
                    cost_usd=Decimal("0.0001"),
                    cost_source="provider",
                )
            )
            i += 1
        ok = led.flush(timeout=120)
        done[:8] = struct.pack("<q", i)
    led.close()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
