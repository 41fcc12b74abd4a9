"""Redis backends: one limiter and one response cache for many instances.

The ADR's acknowledged gap: behind a load balancer each instance would count
and cache alone. Here the sliding log lives in a Redis sorted set per key,
updated by one Lua script (atomic: no two instances can both take the last
slot), timed by Redis's own clock (``TIME``), so instances with skewed clocks
still share one window; the key expires one window after its last request, so
idle keys free themselves. Cache entries are plain strings with a TTL.

**Redis going away never takes the service down.** A connection failure (refused,
reset, a name that does not resolve) or a timeout on connecting or on an answer
switches to the in-process limiter and skips the shared cache (the local one
still works), logging one warning for the outage, with its cause; after
``retry_interval_s`` the next request tries Redis again, and a success logs
its recovery. Timeouts are short (Redis on the request path must answer in
milliseconds or not at all) and a dropped connection is retried once at once,
so a killed connection (``CLIENT KILL``) just reconnects. Other Redis errors (a
script bug, a wrong type) are ours to fix and propagate.

**A busy pool is back-pressure, not an outage.** Each client (the sync one, and
one per event loop) has a *blocking* pool of ``max_connections``: a request
that finds every connection in use waits for one, for at most ``wait_s`` (the
request's deadline for a decision, default 2 s: far longer than Redis takes to
answer, which ``timeout_s`` bounds), instead of failing. Neither a full pool nor
a wait that runs out says anything about Redis being reachable, so neither
switches to the in-process limiter: each instance would then admit up to its
own limit on top of the shared one (two workers under a burst of 500 admitted
200 against a limit of 100 when a 0.25 s wait ran out). A request whose wait
runs out is refused with ``Retry-After`` instead (:data:`BUSY_RETRY_AFTER_S`),
and a warning says the pool is too small, at most once a minute; the shared
count stays exact. If meanwhile another request found Redis unreachable, the
waiting one is served in process like every request during the outage.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import queue
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any, Final

import redis
import redis.asyncio
import redis.asyncio.retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ledger.errors import ConfigurationError
from ledger.resilience.limiter import Decision, SlidingWindowLimiter

log = logging.getLogger("ledger.resilience")

#: Failures that mean "Redis is not there", as opposed to a bug in our use of it.
#: :class:`RedisPoolBusy` is among them for callers that only skip Redis for one
#: request (the cache, the budgets); :class:`RedisHealth` never counts it as an outage.
UNREACHABLE: Final = (RedisConnectionError, RedisTimeoutError, OSError)

#: ``Retry-After`` of a request refused because no pooled connection freed up in time.
BUSY_RETRY_AFTER_S: Final = 1.0

#: redis-py's message when a blocking pool's wait runs out (the class alone, its
#: ``ConnectionError``, is the one a refused connection raises).
_NO_CONNECTION: Final = "No connection available."


class RedisPoolBusy(RedisConnectionError):
    """Every pooled connection stayed in use for the whole wait: Redis is busy, not gone.

    A subclass of redis-py's ``ConnectionError`` so that code which knows only
    :data:`UNREACHABLE` still skips Redis for this one request instead of failing it.
    """


def _pool_wait_ran_out(exc: RedisConnectionError) -> bool:
    """Whether ``exc`` is a blocking pool's "no connection in time" (sync or asyncio)."""
    cause = exc.__cause__ or exc.__context__
    # sync: raised while handling queue.Empty; asyncio: raised from the wait's TimeoutError
    return str(exc) == _NO_CONNECTION and isinstance(cause, queue.Empty | TimeoutError)


class _BlockingPool(redis.BlockingConnectionPool):
    """redis-py's blocking pool, telling a wait that ran out from Redis being unreachable."""

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except RedisConnectionError as exc:
            if _pool_wait_ran_out(exc):
                raise RedisPoolBusy(_busy_message(self.max_connections, self.timeout)) from exc
            raise


class _AsyncBlockingPool(redis.asyncio.BlockingConnectionPool):
    """:class:`_BlockingPool` for asyncio clients."""

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
        except RedisConnectionError as exc:
            if _pool_wait_ran_out(exc):
                raise RedisPoolBusy(_busy_message(self.max_connections, self.timeout)) from exc
            raise


def _busy_message(max_connections: int, wait_s: float | None) -> str:
    return f"all {max_connections} pooled Redis connections stayed in use for {wait_s:g} s"


# KEYS[1] the key's log; ARGV window ms, limit, a unique member. Returns
# {allowed 0/1, remaining, retry_after_ms}. Milliseconds keep every number
# exact in Lua's 14-significant-digit number-to-string conversion.
SLIDING_LOG_LUA: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
if count < limit then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window)
  return {1, limit - count - 1, 0}
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {0, 0, tonumber(oldest[2]) + window - now}
"""


class RedisHealth:
    """Whether to use Redis right now; logs one warning per outage."""

    #: Seconds between two warnings that the pool is too small.
    BUSY_WARNING_INTERVAL_S: Final = 60.0

    def __init__(
        self, *, retry_interval_s: float = 5.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.retry_interval_s = retry_interval_s
        self._clock = clock
        self._down_until: float | None = None
        self._busy_warned_at: float | None = None
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        """True during an outage (between a failure and the next success)."""
        return self._down_until is not None

    def usable(self) -> bool:
        """False while down and the retry interval has not passed yet."""
        until = self._down_until
        return until is None or self._clock() >= until

    def failed(self, exc: BaseException) -> None:
        if isinstance(exc, RedisPoolBusy):
            self.busy(exc)  # Redis answered others all along: not an outage
            return
        with self._lock:
            first = self._down_until is None
            self._down_until = self._clock() + self.retry_interval_s
        if first:
            # redis-py's messages name host and port, never the password.
            log.warning(
                "Redis unreachable (%s%s: %s): using the in-process rate limiter and budget "
                "totals and skipping the shared response cache until it is back",
                _os_cause(exc),
                type(exc).__name__,
                exc,
            )

    def busy(self, exc: RedisPoolBusy) -> None:
        """A wait for a pooled connection ran out: warn, at most once a minute."""
        now = self._clock()
        with self._lock:
            last = self._busy_warned_at
            if last is not None and now - last < self.BUSY_WARNING_INTERVAL_S:
                return
            self._busy_warned_at = now
        log.warning(
            "Redis connection pool busy (%s): the rate limiter refuses such requests with "
            "Retry-After rather than counting them in process, the cache and budgets skip "
            "Redis for them; raise LEDGER_REDIS_MAX_CONNECTIONS or LEDGER_REDIS_WAIT_S",
            exc,
        )

    def succeeded(self) -> None:
        if self._down_until is None:
            return
        with self._lock:
            was_down, self._down_until = self._down_until is not None, None
        if was_down:  # re-read under the lock: another thread may have logged it
            log.info("Redis reachable again: shared rate limiter, cache and budgets resumed")


def _os_cause(exc: BaseException) -> str:
    """``"connection refused: "``, say: the system's words for the socket error behind
    ``exc`` (asyncio's say only "Connect call failed"), or "" when there is none."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and cause.errno is not None:
            words = os.strerror(cause.errno) if cause.errno > 0 else cause.strerror
            return f"{words.lower()}: " if words else ""
        cause = cause.__cause__ or cause.__context__
    return ""


class RedisConnections:
    """A sync client and one asyncio client per event loop, for one Redis URL.

    asyncio connections belong to the loop that opened them, so each loop
    (uvicorn's, a test's) gets its own client. Each client has a blocking pool
    of ``max_connections``; ``timeout_s`` bounds connecting and each answer,
    ``wait_s`` the wait for a free connection (see the module docstring).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 0.25,
        max_connections: int = 100,
        wait_s: float = 2.0,
    ) -> None:
        if timeout_s <= 0 or max_connections < 1 or wait_s <= 0:
            raise ConfigurationError("Redis: timeout_s > 0, wait_s > 0 and max_connections >= 1")
        self.url = url
        self.timeout_s = timeout_s
        self.max_connections = max_connections
        self.wait_s = wait_s
        self._options: dict[str, Any] = {
            "max_connections": max_connections,
            "timeout": wait_s,  # the pool's wait for a free connection: the request's deadline
            "socket_timeout": timeout_s,
            "socket_connect_timeout": timeout_s,
        }
        pool = _BlockingPool.from_url(url, retry=Retry(NoBackoff(), 1), **self._options)
        self.client = redis.Redis.from_pool(pool)
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, redis.asyncio.Redis] = (
            weakref.WeakKeyDictionary()
        )

    def async_client(self) -> redis.asyncio.Redis:
        loop = asyncio.get_running_loop()
        client = self._async.get(loop)
        if client is None:
            pool = _AsyncBlockingPool.from_url(
                self.url, retry=redis.asyncio.retry.Retry(NoBackoff(), 1), **self._options
            )
            client = self._async[loop] = redis.asyncio.Redis.from_pool(pool)
        return client

    def close(self) -> None:
        """Close every client: the sync one, and each loop's asyncio one.

        Call it from outside the serving loop (after ``uvicorn.Server.serve``
        returns, say, or from another thread while the loop still runs); from a
        coroutine on that loop, ``await aclose()`` instead.
        """
        self.client.close()
        for loop, client in list(self._async.items()):
            if loop.is_closed():
                continue
            if loop.is_running():
                if _running_loop() is loop:
                    continue  # cannot block here; aclose() is the way from inside
                asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(timeout=5)
            else:
                loop.run_until_complete(client.aclose())
            del self._async[loop]

    async def aclose(self) -> None:
        """Close this loop's asyncio client."""
        client = self._async.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class RedisSlidingWindowLimiter:
    """The sliding-log limiter shared through Redis; ``fallback`` serves during outages."""

    def __init__(
        self,
        connections: RedisConnections,
        limit: int,
        window_s: float,
        *,
        prefix: str = "ledger:",
        health: RedisHealth | None = None,
        fallback: SlidingWindowLimiter | None = None,
    ) -> None:
        self.fallback = fallback or SlidingWindowLimiter(limit, window_s)
        self.limit, self.window_s = limit, float(window_s)
        self.connections = connections
        self.prefix = f"{prefix}rl:"
        self.health = health or RedisHealth()
        self._window_ms = max(1, math.ceil(window_s * 1000))
        self._script = connections.client.register_script(SLIDING_LOG_LUA)
        # Sorted-set members must be unique; next() on a count is atomic under the GIL.
        self._instance = uuid.uuid4().hex
        self._counter = itertools.count()

    def _args(self) -> list[Any]:
        return [self._window_ms, self.limit, f"{self._instance}:{next(self._counter)}"]

    def check(self, key: str) -> Decision:
        if not self.health.usable():
            return self.fallback.check(key)
        try:
            reply = self._script(keys=[self.prefix + key], args=self._args())
        except RedisPoolBusy as exc:
            return self._busy(key, exc)
        except UNREACHABLE as exc:
            self.health.failed(exc)
            return self.fallback.check(key)
        self.health.succeeded()
        return _decision(reply)

    async def acheck(self, key: str) -> Decision:
        if not self.health.usable():
            return self.fallback.check(key)
        try:
            reply = await self._aeval(self.prefix + key)
        except RedisPoolBusy as exc:
            return self._busy(key, exc)
        except UNREACHABLE as exc:
            self.health.failed(exc)
            return self.fallback.check(key)
        self.health.succeeded()
        return _decision(reply)

    async def _aeval(self, name: str) -> Any:
        client = self.connections.async_client()
        try:
            return await client.evalsha(self._script.sha, 1, name, *self._args())
        except redis.exceptions.NoScriptError:  # a restarted Redis: load it again
            return await client.eval(SLIDING_LOG_LUA, 1, name, *self._args())

    def _busy(self, key: str, exc: RedisPoolBusy) -> Decision:
        """No connection freed up in time: refuse, unless Redis was found gone meanwhile.

        Counting the request in process would admit it beyond the shared limit.
        """
        if self.health.down:
            return self.fallback.check(key)
        self.health.busy(exc)
        return Decision(False, 0, BUSY_RETRY_AFTER_S)


def _decision(reply: Any) -> Decision:
    allowed, remaining, retry_ms = (int(x) for x in reply)
    return Decision(bool(allowed), remaining, retry_ms / 1000)


class RedisCacheStore:
    """The response cache's shared store: ``SET key value PX ttl`` / ``GET key``."""

    def __init__(
        self,
        connections: RedisConnections,
        *,
        prefix: str = "ledger:",
        health: RedisHealth | None = None,
        max_entry_bytes: int = 1 * 2**20,
    ) -> None:
        self.connections = connections
        self.prefix = f"{prefix}rc:"
        self.health = health or RedisHealth()
        self.max_entry_bytes = max_entry_bytes

    def get(self, key: str) -> bytes | None:
        if not self.health.usable():
            return None
        try:
            data = self.connections.client.get(self.prefix + key)
        except UNREACHABLE as exc:
            self.health.failed(exc)
            return None
        self.health.succeeded()
        return _as_bytes(data)

    def set(self, key: str, data: bytes, ttl_s: float) -> None:
        if len(data) > self.max_entry_bytes or not self.health.usable():
            return
        try:
            self.connections.client.set(self.prefix + key, data, px=_ttl_ms(ttl_s))
        except UNREACHABLE as exc:
            self.health.failed(exc)
            return
        self.health.succeeded()

    async def aget(self, key: str) -> bytes | None:
        if not self.health.usable():
            return None
        try:
            data = await self.connections.async_client().get(self.prefix + key)
        except UNREACHABLE as exc:
            self.health.failed(exc)
            return None
        self.health.succeeded()
        return _as_bytes(data)

    async def aset(self, key: str, data: bytes, ttl_s: float) -> None:
        if len(data) > self.max_entry_bytes or not self.health.usable():
            return
        try:
            await self.connections.async_client().set(self.prefix + key, data, px=_ttl_ms(ttl_s))
        except UNREACHABLE as exc:
            self.health.failed(exc)
            return
        self.health.succeeded()


def _ttl_ms(ttl_s: float) -> int:
    return max(1, math.ceil(ttl_s * 1000))


def _as_bytes(data: Any) -> bytes | None:
    return None if data is None else bytes(data)
