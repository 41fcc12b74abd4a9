"""The TTL response cache: compute an answer once, serve it to everyone asking the same.

Keys come from :func:`ledger.resilience.keys.cache_key`. Entries live for
``ttl_s`` seconds in a local table bounded by entry count and by bytes (least
recently used evicted first) and, when a shared store is configured (Redis),
there too, so every instance behind a load balancer benefits.

Only final answers are stored. :func:`is_final` refuses exceptions, paused
(human-in-the-loop) turns, partial or interrupted results and live iterators
(a stream can be consumed once); the same test runs on every read, so a paused
draft is never served even if a store somehow holds one.

**Single flight.** While one caller computes a key, identical callers wait for
it instead of calling the provider again: if it succeeds they all get its
answer (a cache hit for each of them), if it fails they all get its exception
and nothing is stored. If the answer is not final (a paused turn) it is not
shared: each waiter computes its own, since a draft for one session must not
reach another. The computation of a coroutine caller runs as its own task, so
cancelling any caller (the first one included) never cancels it for the others.

How it holds with a slow shared store: a caller takes one lock, looks in the
local table and, on a miss, joins the key's flight or registers a new one with
itself as leader, all before anything slow happens. Only the leader then asks
the shared store (a Redis round trip) and, on a miss there, computes. It stores
the answer locally, wakes its waiters, writes the shared store, and only then
releases the flight; a caller arriving at any moment therefore finds either the
answer or the flight, never a gap in which to start a second computation.

Threads and coroutines share one table: a thread can wait for a coroutine's
computation and a coroutine for a thread's (or another event loop's), woken
through ``call_soon_threadsafe``. One exception keeps a blocking call from
deadlocking: a *synchronous* call made on the very event loop that is
computing the key cannot wait for it (the loop could never finish), so it
computes its own answer.

**What it does not guarantee across instances.** There is no cross-instance
single flight: the flight table belongs to one ``ResponseCache`` in one
process. The shared store makes every request that arrives after the first
answer is written a hit on every instance, but identical requests that reach
several instances while the answer is being computed make one provider call
per instance (one per instance per key at a time, never more). A distributed
lock in Redis would close that gap at the price of a lock round trip and a
lease to expire on every miss, and a leader that dies holding it; not done here.
If a leader is interrupted without an answer or an ``Exception`` (a
``KeyboardInterrupt``, its task cancelled with its loop), its waiters do not
hang: each computes its own answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import pickle
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any, Final, Generic, NamedTuple, Protocol, TypeVar, cast

from ledger.errors import ConfigurationError

V = TypeVar("V")
log = logging.getLogger("ledger.resilience")

_NOT_FINAL_FLAGS: Final = ("paused", "partial", "interrupted")


class Served(NamedTuple, Generic[V]):
    """A value and whether it came without a provider call (cache or a shared flight)."""

    value: V
    hit: bool


class Codec(Protocol[V]):
    """Bytes for the shared store and back; only values that passed :func:`is_final`."""

    def dumps(self, value: V) -> bytes: ...

    def loads(self, data: bytes) -> V: ...


class JsonCodec:
    """JSON values (dicts, lists, strings, numbers). Never pickle: a shared store
    that anyone on the network can write must not be able to run code here."""

    def dumps(self, value: Any) -> bytes:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


class SharedStore(Protocol):
    """A store every instance sees (Redis). It absorbs its own outages: a read
    during one returns None and a write is dropped."""

    def get(self, key: str) -> bytes | None: ...

    def set(self, key: str, data: bytes, ttl_s: float) -> None: ...

    async def aget(self, key: str) -> bytes | None: ...

    async def aset(self, key: str, data: bytes, ttl_s: float) -> None: ...


def is_final(value: object) -> bool:
    """Whether ``value`` is a complete answer that may be served to someone else."""
    if isinstance(value, BaseException | Iterator | AsyncIterator):
        return False
    if isinstance(value, Mapping):
        flags: Callable[[str], object] = value.get
        complete = value.get("complete", True)
    else:
        flags = lambda name: getattr(value, name, False)  # noqa: E731
        complete = getattr(value, "complete", True)
    return complete is not False and not any(flags(flag) for flag in _NOT_FINAL_FLAGS)


def default_size(value: object) -> int:
    """Approximate bytes held by ``value`` (its pickle length, else its repr's)."""
    try:
        return len(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # unpicklable values still need a size; repr always works
        return len(repr(value).encode("utf-8", "replace"))


class _Entry(NamedTuple):
    value: Any
    size: int
    expires_at: float


class _Store:
    """The local table: TTL + LRU, bounded by entries and bytes. Not locked itself."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self.entries: OrderedDict[str, _Entry] = OrderedDict()

    def get(self, key: str, now: float) -> _Entry | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        if entry.expires_at <= now:
            self._drop(key)
            return None
        self.entries.move_to_end(key)
        return entry

    def put(self, key: str, entry: _Entry) -> bool:
        if entry.size > self.max_bytes:
            return False
        if key in self.entries:
            self._drop(key)
        while self.entries and (
            len(self.entries) >= self.max_entries or self.bytes + entry.size > self.max_bytes
        ):
            self._drop(next(iter(self.entries)))
        self.entries[key] = entry
        self.bytes += entry.size
        return True

    def discard(self, key: str, entry: _Entry) -> None:
        """Drop ``key`` if it still holds ``entry`` (another writer may have replaced it)."""
        if self.entries.get(key) is entry:
            self._drop(key)

    def _drop(self, key: str) -> None:
        self.bytes -= self.entries.pop(key).size


class _Flight:
    """One computation of one key, joined by every identical caller until released."""

    __slots__ = ("computed", "done", "error", "loop", "shared", "task", "value", "waiters")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: Exception | None = None
        self.shared = False  # the value may be served to the waiters
        self.computed = False  # the provider was called (else the shared store answered)
        self.loop: asyncio.AbstractEventLoop | None = None  # computing it; None: a thread
        # The loop holds tasks weakly; this reference keeps the computation alive.
        self.task: asyncio.Task[None] | None = None
        self.waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []


# What _claim found: (a local hit, None, False), or (_MISS, the flight, whether we lead
# it). A plain tuple: a NamedTuple's construction alone would add ~10% to a hit.
_Claim = tuple[object, _Flight | None, bool]


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():  # a cancelled waiter's future is already done
        future.set_result(None)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


_MISS: Final = object()


class ResponseCache(Generic[V]):
    """See the module docstring. ``shared`` needs a ``codec`` (JSON by default)."""

    def __init__(
        self,
        *,
        ttl_s: float = 300.0,
        max_entries: int = 1024,
        max_bytes: int = 32 * 2**20,
        shared: SharedStore | None = None,
        codec: Codec[V] | None = None,
        cacheable: Callable[[V], bool] = is_final,
        size_of: Callable[[V], int] = default_size,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_s <= 0 or max_entries < 1 or max_bytes < 1:
            raise ConfigurationError("response cache: ttl_s > 0, max_entries and max_bytes >= 1")
        self.ttl_s = float(ttl_s)
        self.shared = shared
        self._codec: Codec[Any] = codec if codec is not None else JsonCodec()
        self._cacheable = cacheable
        self._size_of = size_of
        self._clock = clock
        self._store = _Store(max_entries, max_bytes)
        self._lock = threading.Lock()
        self._flights: dict[str, _Flight] = {}  # threads and coroutines alike; under _lock

    def __len__(self) -> int:
        return len(self._store.entries)

    @property
    def size_bytes(self) -> int:
        """Bytes held by the local table (as measured by ``size_of``)."""
        return self._store.bytes

    # -- plain reads and writes -------------------------------------------------

    def get(self, key: str) -> V | None:
        """The cached answer for ``key`` (local, then shared), or None."""
        value = self._get_local(key)
        if value is _MISS and self.shared is not None:
            value = self._from_shared(key, self.shared.get(key))
        return None if value is _MISS else cast(V, value)

    async def aget(self, key: str) -> V | None:
        """:meth:`get` without blocking the event loop on the shared store."""
        value = self._get_local(key)
        if value is _MISS and self.shared is not None:
            value = self._from_shared(key, await self.shared.aget(key))
        return None if value is _MISS else cast(V, value)

    def put(self, key: str, value: V) -> bool:
        """Store a final answer locally and in the shared store; False if refused."""
        if not self._put_local(key, value):
            return False
        if self.shared is not None and (data := self._encode(value)):
            self.shared.set(key, data, self.ttl_s)
        return True

    async def aput(self, key: str, value: V) -> bool:
        """:meth:`put` without blocking the event loop on the shared store."""
        if not self._put_local(key, value):
            return False
        if self.shared is not None and (data := self._encode(value)):
            await self.shared.aset(key, data, self.ttl_s)
        return True

    def _get_local(self, key: str) -> object:
        with self._lock:
            entry = self._store.get(key, self._clock())
        if entry is None or not self._cacheable(entry.value):
            return _MISS
        return entry.value

    def _from_shared(self, key: str, data: bytes | None) -> object:
        if data is None:
            return _MISS
        try:
            value = self._codec.loads(data)
        except Exception as exc:  # a stale or foreign entry is a miss, not an outage
            log.warning("response cache: undecodable shared entry ignored (%s)", type(exc).__name__)
            return _MISS
        if not self._cacheable(value):
            return _MISS
        self._put_local(key, value)
        return value

    def _put_local(self, key: str, value: V) -> bool:
        """Store ``value`` if final (and if it fits); return whether it is final."""
        if not self._cacheable(value):
            return False
        entry = _Entry(value, self._size_of(value), self._clock() + self.ttl_s)
        with self._lock:
            self._store.put(key, entry)
        return True

    def _encode(self, value: V) -> bytes | None:
        try:
            return self._codec.dumps(value)
        except Exception as exc:  # the answer is still good locally
            log.warning("response cache: value not encodable (%s)", type(exc).__name__)
            return None

    # -- single flight -------------------------------------------------------------

    def get_or_compute(
        self, key: str, compute: Callable[[], V], *, bypass: bool = False
    ) -> Served[V]:
        """The cached answer, else ``compute()`` once for all concurrent identical callers.

        ``bypass=True`` (a paused or resumed turn) neither reads nor writes the cache.
        """
        if bypass:
            return Served(compute(), False)
        value, flight, leader = self._claim(key)
        if flight is None:
            return Served(cast(V, value), True)
        if leader:
            return self._lead(key, flight, compute)
        if flight.loop is None or flight.loop is not _running_loop():
            flight.done.wait()
            served = self._outcome(flight)
            if served is not None:
                return served
        # Not shareable, or computed by the loop this call blocks: it cannot wait.
        return Served(compute(), False)

    async def aget_or_compute(
        self, key: str, compute: Callable[[], Awaitable[V]], *, bypass: bool = False
    ) -> Served[V]:
        """:meth:`get_or_compute` for coroutines. The computation runs as its own
        task, so a waiter that is cancelled never cancels it for the others."""
        if bypass:
            return Served(await compute(), False)
        value, flight, leader = self._claim(key)
        if flight is None:
            return Served(cast(V, value), True)
        # Looked up after the hit path, which does not need it. Setting the leader's
        # loop here is in time: only a caller on this thread checks it, and none can
        # run before this coroutine's next await.
        loop = asyncio.get_running_loop()
        if leader:
            flight.loop = loop
            task = flight.task = loop.create_task(self._alead(key, flight, compute))
            await asyncio.shield(task)
            if flight.error is not None:
                raise flight.error
            return Served(cast(V, flight.value), not flight.computed)
        await self._wait(flight, loop)
        served = self._outcome(flight)
        return served if served is not None else Served(await compute(), False)

    def _claim(self, key: str) -> _Claim:
        """A local hit, else the key's flight: joined, or registered with us leading.

        One lock covers the table lookup and the registration, and a leader stores
        its answer before releasing its flight, so no caller can slip between the
        two and start a second computation (the module docstring has the sequence).
        """
        while True:
            with self._lock:
                entry = self._store.get(key, self._clock())
                if entry is None:
                    flight = self._flights.get(key)
                    if flight is not None:
                        return _MISS, flight, False
                    flight = self._flights[key] = _Flight()
                    return _MISS, flight, True
            # The check runs outside the lock: ``cacheable`` is the caller's code.
            if self._cacheable(entry.value):
                return entry.value, None, False
            with self._lock:  # refused on read: never serve it, and stop finding it
                self._store.discard(key, entry)

    def _lead(self, key: str, flight: _Flight, compute: Callable[[], V]) -> Served[V]:
        try:
            try:
                data = self.shared.get(key) if self.shared is not None else None
                value = self._from_shared(key, data)
                if value is _MISS:
                    value, flight.computed = compute(), True
                shared = not flight.computed or self._put_local(key, cast(V, value))
            except Exception as exc:
                self._land(flight, error=exc)
                raise
            self._land(flight, value, shared)
            if self.shared is not None and (data := self._for_shared(flight)):
                self.shared.set(key, data, self.ttl_s)
        finally:
            self._release(key, flight)
        return Served(cast(V, value), not flight.computed)

    async def _alead(self, key: str, flight: _Flight, compute: Callable[[], Awaitable[V]]) -> None:
        """The leader's work as a task. It reports failures through the flight, not
        by raising: a task whose callers were all cancelled must not log an error."""
        try:
            try:
                data = await self.shared.aget(key) if self.shared is not None else None
                value = self._from_shared(key, data)
                if value is _MISS:
                    value = await compute()
                    flight.computed = True
                shared = not flight.computed or self._put_local(key, cast(V, value))
            except Exception as exc:
                self._land(flight, error=exc)
                return
            self._land(flight, value, shared)
            if self.shared is not None and (data := self._for_shared(flight)):
                await self.shared.aset(key, data, self.ttl_s)
        finally:
            self._release(key, flight)

    def _land(
        self,
        flight: _Flight,
        value: object = None,
        shared: bool = False,
        error: Exception | None = None,
    ) -> None:
        """Publish the flight's outcome and wake every waiter, thread or coroutine."""
        flight.value, flight.shared, flight.error = value, shared, error
        with self._lock:  # a coroutine registers under this lock, so none is missed
            waiters, flight.waiters = flight.waiters, []
            flight.done.set()
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # its loop has closed: no one to wake
                loop.call_soon_threadsafe(_wake, future)

    def _for_shared(self, flight: _Flight) -> bytes | None:
        """The bytes to write to the shared store: only a fresh, final answer."""
        return self._encode(flight.value) if flight.computed and flight.shared else None

    def _release(self, key: str, flight: _Flight) -> None:
        """Unregister the flight, after landing it with nothing to share if the leader
        was interrupted (KeyboardInterrupt, a cancelled task): its waiters then compute
        their own answers instead of waiting forever."""
        if not flight.done.is_set():
            self._land(flight)
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]

    async def _wait(self, flight: _Flight, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            if flight.done.is_set():
                return
            future: asyncio.Future[None] = loop.create_future()
            flight.waiters.append((loop, future))
        await future

    @staticmethod
    def _outcome(flight: _Flight) -> Served[V] | None:
        """A landed flight's answer for a waiter; None if it is not for sharing."""
        if flight.error is not None:
            raise flight.error
        return Served(cast(V, flight.value), True) if flight.shared else None
