"""Child process for the held-in-memory tests: records events on a full disk, then waits.

Usage: python held_child.py URL JOURNAL_DIR COUNT READY_FILE

Starts a ledger (its first segment and status file fit), then every new journal
segment fails with ENOSPC, as on a full disk. Records COUNT events of ~1.8 KB,
writes how many it recorded and how many its ledger holds only in memory to
READY_FILE ("recorded held"), and sleeps until killed.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from decimal import Decimal
from pathlib import Path

from ledger.events import UsageEvent
from ledger.store.ledger import Ledger


def no_space(fd: int, offset: int, length: int) -> None:
    raise OSError(28, "No space left on device")


def main() -> None:
    url, journal_dir, count, ready = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    led = Ledger(url, journal_dir=journal_dir, segment_bytes=8_192, flush_interval_s=0.01)
    os.posix_fallocate = no_space
    start = dt.datetime.now(dt.UTC)
    for i in range(count):
        led.record(
            UsageEvent(
                started_at=start + dt.timedelta(milliseconds=i),
                requested_provider="openai",
                requested_model="gpt-4o-mini",
                provider="openai",
                status="ok",
                input_tokens=100,
                output_tokens=10,
                cost_usd=Decimal("0.0001"),
                cost_source="computed",
                tags={"pad": "x" * 1500},
            )
        )
    Path(ready).write_text(f"{count} {led.held_in_memory}")
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main()
