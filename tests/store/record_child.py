"""Child process for the durability tests: records numbered events as fast as it can.

Usage: python record_child.py URL JOURNAL_DIR COUNT PROGRESS_FILE [BATCH [FIRST]]
Event i has event_id uuid5(NAMESPACE, str(FIRST + i)). After record() returns for
event i, i+1 is stored in the 8-byte PROGRESS_FILE: what the parent may rely on.
"""

from __future__ import annotations

import datetime as dt
import mmap
import struct
import sys
import uuid
from decimal import Decimal
from pathlib import Path

from ledger.events import UsageEvent
from ledger.store.ledger import Ledger

NAMESPACE = uuid.UUID("6f0d4c8e-8f55-4a8e-9d0c-5b1f2f3c9a10")


def event_id(i: int) -> str:
    return str(uuid.uuid5(NAMESPACE, str(i)))


def main() -> None:
    url, journal_dir, count, progress = (
        sys.argv[1],
        Path(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
    )
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 5000
    first = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    with open(progress, "r+b") as f:
        done = mmap.mmap(f.fileno(), 8)
    led = Ledger(url, journal_dir=journal_dir, batch_size=batch, flush_interval_s=0.01)
    start = dt.datetime.now(dt.UTC)
    for i in range(count):
        led.record(
            UsageEvent(
                event_id=event_id(first + i),
                started_at=start + dt.timedelta(milliseconds=i),
                requested_provider="openrouter",
                requested_model="deepseek/deepseek-chat",
                provider="openrouter",
                status="ok",
                session_id=f"s{i % 97}",
                actor_id="worker",
                input_tokens=100,
                output_tokens=10,
                cost_usd=Decimal("0.0001"),
                cost_source="provider",
            )
        )
        done[:8] = struct.pack("<q", i + 1)
    ok = led.flush(timeout=120)
    led.close()
    sys.exit(0 if ok else 3)


if __name__ == "__main__":
    main()
