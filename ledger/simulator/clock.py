"""Clocks for the simulator: virtual time for fast workloads, wall time for the server.

A workload that spans hours (idle gaps longer than OpenRouter's 10-minute pin
window, approval waits) must run in seconds, so the simulator never reads the
system clock directly: it asks a :class:`Clock`. :class:`VirtualClock` only
moves when told to (``advance``/``sleep`` return at once), which also makes
every timing the simulator reports deterministic. :class:`WallClock` is real
time, with simulated latencies optionally scaled down (``latency_scale=0``
serves as fast as the machine allows).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Protocol, runtime_checkable

#: 2025-01-01T00:00:00Z: a fixed, readable epoch for virtual runs.
DEFAULT_VIRTUAL_EPOCH = 1_735_689_600.0


@runtime_checkable
class Clock(Protocol):
    """What the simulator needs from time."""

    def time(self) -> float:
        """Seconds since the Unix epoch (UTC)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Let ``seconds`` of simulated latency pass (blocking)."""
        ...

    async def asleep(self, seconds: float) -> None:
        """Let ``seconds`` of simulated latency pass (async)."""
        ...


class VirtualClock:
    """Time that moves only when advanced; ``sleep`` advances it instantly.

    Thread-safe: concurrent sleepers each advance the shared time by their own
    delay. A discrete-event loop (the demo's) runs overlapping sessions on it by
    :meth:`move_to` each event's own time, earlier or later than the last call's
    end: a call in flight in one session then delays no other.
    """

    def __init__(self, start: float = DEFAULT_VIRTUAL_EPOCH) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (must be >= 0); returns the new time."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards (advance by {seconds})")
        with self._lock:
            self._now += seconds
            return self._now

    def move_to(self, at: float) -> None:
        """Set the time to ``at``, back as well as forward: the start of the next event.

        Everything the simulator keeps by time (pins, caches, outages, calls in flight)
        is judged at the time it is asked about, so an event may start before the
        previous one ended, as overlapping requests do.
        """
        with self._lock:
            self._now = float(at)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    async def asleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)


class WallClock:
    """Real time; simulated latencies are slept for ``latency_scale`` times their length."""

    def __init__(self, latency_scale: float = 1.0) -> None:
        if latency_scale < 0:
            raise ValueError(f"latency_scale must be >= 0, got {latency_scale}")
        self.latency_scale = latency_scale

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        if seconds > 0 and self.latency_scale > 0:
            time.sleep(seconds * self.latency_scale)

    async def asleep(self, seconds: float) -> None:
        if seconds > 0 and self.latency_scale > 0:
            await asyncio.sleep(seconds * self.latency_scale)
