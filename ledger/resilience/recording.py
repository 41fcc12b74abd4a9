"""The cache around an LLM call, writing the ledger row for every hit.

:class:`CachedCall` wraps any function that answers a :class:`Turn` (the real
client, a cascade, an agent step). A miss calls it, and the client records its
own provider attempts as usual. A hit (from the cache, or from sharing another
caller's in-flight computation) costs no provider call, and gets one row of its
own, as contract §1 asks: ``attempt = 0``, ``response_cache_hit = true``, no
tokens, no cost, this caller's session/actor/locale/tags and requested
provider/model, and as ``provider``/``model``/``upstream`` whoever produced the
answer originally, so the cache's savings are credited to the right upstream.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from ledger.clock import SYSTEM_CLOCK, Clock
from ledger.events import UsageEvent
from ledger.resilience.cache import ResponseCache
from ledger.resilience.keys import cache_key

V = TypeVar("V")
log = logging.getLogger("ledger.resilience")


class UsageRecorder(Protocol):
    """Anything with :meth:`ledger.store.ledger.Ledger.record`'s signature."""

    def record(self, event: UsageEvent) -> str: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """One request to answer: what the cache keys on and who is asking.

    ``paused`` marks a human-in-the-loop turn (a draft awaiting approval, or the
    resumption of one): it is never answered from the cache nor stored in it.
    """

    text: str
    model: str
    requested_provider: str
    locale: str | None = None
    session_id: str | None = None
    actor_id: str | None = None
    tags: dict[str, Any] | None = None
    paused: bool = False

    @property
    def key(self) -> str:
        """The cache key of this turn (see :mod:`ledger.resilience.keys`)."""
        return cache_key(self.text, self.locale, self.model)


class Origin(NamedTuple):
    """Who produced a cached answer: written on the rows of its hits."""

    provider: str
    model: str | None = None
    upstream: str | None = None


def origin_of(value: object) -> Origin:
    """The ``provider``/``model``/``upstream`` attributes (or keys) of a result."""
    if isinstance(value, dict):
        return Origin(str(value["provider"]), value.get("model"), value.get("upstream"))
    return Origin(
        str(value.provider),  # type: ignore[attr-defined]
        getattr(value, "model", None),
        getattr(value, "upstream", None),
    )


def hit_event(
    turn: Turn, origin: Origin, *, started_at: dt.datetime, latency_ms: float
) -> UsageEvent:
    """The ledger row of one cache hit (see the module docstring)."""
    return UsageEvent(
        started_at=started_at,
        attempt=0,
        response_cache_hit=True,
        status="ok",
        requested_provider=turn.requested_provider,
        requested_model=turn.model,
        provider=origin.provider,
        model=origin.model,
        upstream=origin.upstream,
        latency_ms=latency_ms,
        session_id=turn.session_id,
        actor_id=turn.actor_id,
        locale=turn.locale,
        tags=turn.tags,
    )


class _Recording(Generic[V]):
    def __init__(
        self,
        cache: ResponseCache[V],
        recorder: UsageRecorder | None,
        origin: Callable[[V], Origin],
        clock: Clock,
    ) -> None:
        self.cache = cache
        self.recorder = recorder
        self.origin = origin
        self.clock = clock

    def _record_hit(self, turn: Turn, value: V, started_at: dt.datetime, t0: float) -> None:
        if self.recorder is None:
            return
        try:
            event = hit_event(
                turn,
                self.origin(value),
                started_at=started_at,
                latency_ms=(self.clock.monotonic() - t0) * 1000,
            )
            self.recorder.record(event)
        except Exception:  # recording never breaks the answer (architecture.md)
            log.exception("response cache: the hit's ledger row could not be recorded")


class CachedCall(_Recording[V]):
    """``fn(turn)`` behind the response cache; ``CachedCall(fn, cache, ledger)(turn)``."""

    def __init__(
        self,
        fn: Callable[[Turn], V],
        cache: ResponseCache[V],
        recorder: UsageRecorder | None,
        *,
        origin: Callable[[V], Origin] = origin_of,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(cache, recorder, origin, clock)
        self.fn = fn

    def __call__(self, turn: Turn) -> V:
        started_at, t0 = self.clock.now(), self.clock.monotonic()
        served = self.cache.get_or_compute(turn.key, lambda: self.fn(turn), bypass=turn.paused)
        if served.hit:
            self._record_hit(turn, served.value, started_at, t0)
        return served.value


class AsyncCachedCall(_Recording[V]):
    """``await fn(turn)`` behind the response cache (see :class:`CachedCall`)."""

    def __init__(
        self,
        fn: Callable[[Turn], Awaitable[V]],
        cache: ResponseCache[V],
        recorder: UsageRecorder | None,
        *,
        origin: Callable[[V], Origin] = origin_of,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(cache, recorder, origin, clock)
        self.fn = fn

    async def __call__(self, turn: Turn) -> V:
        started_at, t0 = self.clock.now(), self.clock.monotonic()
        served = await self.cache.aget_or_compute(
            turn.key, lambda: self.fn(turn), bypass=turn.paused
        )
        if served.hit:
            self._record_hit(turn, served.value, started_at, t0)
        return served.value
