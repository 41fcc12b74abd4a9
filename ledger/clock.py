"""Where ledger code reads time, so a simulated workload can substitute its own.

``now`` stamps a row's ``started_at``; ``monotonic`` (seconds) measures
latencies. The demo runs the real client, cascade and response cache on the
simulator's virtual clock, so hours of traffic take seconds and the ledger's
timestamps still tell the simulated story.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Final, Protocol


class Clock(Protocol):
    def now(self) -> dt.datetime:
        """Timezone-aware UTC wall time."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""


class SystemClock:
    """The real clock: UTC wall time and ``time.perf_counter``."""

    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    def monotonic(self) -> float:
        return time.perf_counter()


SYSTEM_CLOCK: Final = SystemClock()
