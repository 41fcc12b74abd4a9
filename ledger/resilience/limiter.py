"""The in-process sliding-log rate limiter.

**A sliding log, not buckets.** Each key keeps the times of its accepted
requests within the last ``window_s`` seconds; a request is accepted while fewer
than ``limit`` remain. The guarantee is exact: no key ever gets more than
``limit`` requests in *any* window of ``window_s`` seconds. Fixed buckets allow
twice the limit across a bucket edge, and the two-bucket "sliding window
counter" only estimates the previous bucket's share; both would also make
``Retry-After`` a guess. With a log, the wait is exact: the oldest entry's time
plus the window, minus now. The price is memory proportional to ``limit`` per
key, which the key bound below caps.

**Bounded memory.** Keys are kept in least-recently-seen order. Each decision
drops up to two keys from the cold end whose newest entry has left the window
(idle keys), and a new key arriving when ``max_keys`` are held evicts the
coldest one, so a flood of distinct addresses cannot grow the table past
``max_keys × limit`` timestamps. Evicting a key that is still active forgets its
history (it starts afresh): bounded memory wins over perfect memory under a
flood; size ``max_keys`` well above the number of real concurrent clients.

**Thread- and asyncio-safe.** One lock guards the table; it is held for a few
dict and deque operations and never across an ``await``, so coroutines on the
event loop and threads can share one limiter. The clock is read while holding
it, which is what makes the guarantee above exact for the times the clock
gives: decisions are taken one at a time, in the order of their times, each
against every earlier one. (Read before the lock, a thread paused in between
would decide with a time other threads had already moved past, against a log
they had trimmed for a later time, and admit past the limit.)
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import NamedTuple, Protocol, runtime_checkable

from ledger.errors import ConfigurationError, TooManyRequests


class Decision(NamedTuple):
    """The answer for one request.

    ``retry_after_s`` is 0 when allowed, else the seconds until a slot frees.
    """

    allowed: bool
    remaining: int
    retry_after_s: float


@runtime_checkable
class RateLimiter(Protocol):
    """What the middleware and callers need from a limiter, in process or in Redis."""

    limit: int
    window_s: float

    def check(self, key: str) -> Decision:
        """Decide for one request by ``key``, counting it if allowed."""
        ...

    async def acheck(self, key: str) -> Decision:
        """:meth:`check` for the event loop (never blocks it on I/O)."""
        ...


def enforce(limiter: RateLimiter, key: str) -> Decision:
    """:meth:`RateLimiter.check`, raising :class:`~ledger.errors.TooManyRequests` on a rejection."""
    decision = limiter.check(key)
    if not decision.allowed:
        raise TooManyRequests(
            f"rate limit of {limiter.limit} requests per {limiter.window_s:g} s reached",
            retry_after=decision.retry_after_s,
        )
    return decision


class SlidingWindowLimiter:
    """At most ``limit`` requests per key in any ``window_s`` seconds (see the module docstring)."""

    def __init__(
        self,
        limit: int,
        window_s: float,
        *,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit < 1 or window_s <= 0 or max_keys < 1:
            raise ConfigurationError("rate limit: limit and max_keys >= 1, window_s > 0")
        self.limit = limit
        self.window_s = float(window_s)
        self.max_keys = max_keys
        self._clock = clock
        self._logs: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many keys are held now."""
        return len(self._logs)

    def check(self, key: str) -> Decision:
        logs = self._logs
        with self._lock:
            # Under the lock: decisions then happen in the order of their times,
            # each log stays sorted, and a thread descheduled between reading
            # the clock and deciding cannot decide with a time others have passed.
            now = self._clock()
            horizon = now - self.window_s
            log = logs.get(key)
            if log is None:
                log = deque()
                if len(logs) >= self.max_keys:
                    logs.popitem(last=False)
                logs[key] = log
            else:
                logs.move_to_end(key)
                while log and log[0] <= horizon:
                    log.popleft()
            self._drop_idle(horizon)
            if len(log) < self.limit:
                log.append(now)
                return Decision(True, self.limit - len(log), 0.0)
            return Decision(False, 0, log[0] - horizon)

    async def acheck(self, key: str) -> Decision:
        # No I/O: deciding inline is cheaper than any hand-off to a thread.
        return self.check(key)

    def _drop_idle(self, horizon: float) -> None:
        # Two per call outpaces one new key per call, so idle keys cannot pile up.
        for _ in range(2):
            oldest_key = next(iter(self._logs))
            log = self._logs[oldest_key]
            if log and log[-1] > horizon:
                return
            if len(self._logs) == 1:
                return
            del self._logs[oldest_key]
