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
reach another. Threads and coroutines have separate flights (a thread cannot
await a task); within each, one computation per key at a time.
"""

from __future__ import annotations

import asyncio
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

    def _drop(self, key: str) -> None:
        self.bytes -= self.entries.pop(key).size


class _Flight:
    __slots__ = ("done", "error", "shared", "value")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: Exception | None = None
        self.shared = False


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
        self._flights: dict[str, _Flight] = {}
        self._tasks: dict[tuple[int, str], asyncio.Task[tuple[V, bool]]] = {}

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
        cached = self.get(key)
        if cached is not None:
            return Served(cached, True)
        with self._lock:
            flight = self._flights.get(key)
            leader = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
        if not leader:
            return self._follow(flight, compute)
        return self._lead(key, flight, compute)

    def _follow(self, flight: _Flight, compute: Callable[[], V]) -> Served[V]:
        flight.done.wait()
        if flight.error is not None:
            raise flight.error
        if flight.shared:
            return Served(cast(V, flight.value), True)
        return Served(compute(), False)

    def _lead(self, key: str, flight: _Flight, compute: Callable[[], V]) -> Served[V]:
        try:
            value = compute()
            flight.value, flight.shared = value, self._put_local(key, value)
        except Exception as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                del self._flights[key]
            flight.done.set()
        if flight.shared and self.shared is not None and (data := self._encode(value)):
            self.shared.set(key, data, self.ttl_s)
        return Served(value, False)

    async def aget_or_compute(
        self, key: str, compute: Callable[[], Awaitable[V]], *, bypass: bool = False
    ) -> Served[V]:
        """:meth:`get_or_compute` for coroutines. The computation runs as its own
        task, so a waiter that is cancelled never cancels it for the others."""
        if bypass:
            return Served(await compute(), False)
        cached = await self.aget(key)
        if cached is not None:
            return Served(cached, True)
        slot = (id(asyncio.get_running_loop()), key)
        task = self._tasks.get(slot)
        leader = task is None
        if task is None:
            task = self._tasks[slot] = asyncio.ensure_future(self._alead(slot, compute))
        value, shared = await asyncio.shield(task)
        if leader:
            if shared and self.shared is not None and (data := self._encode(value)):
                await self.shared.aset(key, data, self.ttl_s)
            return Served(value, False)
        if shared:
            return Served(value, True)
        return Served(await compute(), False)

    async def _alead(
        self, slot: tuple[int, str], compute: Callable[[], Awaitable[V]]
    ) -> tuple[V, bool]:
        try:
            value = await compute()
            return value, self._put_local(slot[1], value)
        finally:
            del self._tasks[slot]
