"""Fallback across providers (ADR-0014): retry the next route only on transient errors.

A :class:`Cascade` sits behind the same calling shape as the client: it tries
an ordered chain of (provider, model) :class:`Route` s, each attempt a ledger
row sharing one ``call_id`` with ``attempt`` = 1, 2, …; ``requested_provider``
and ``requested_model`` on every row are the chain's first route, and
``provider`` on the ``ok`` row is the one that answered, so the cost ledger
charges who actually served the call. The returned
:class:`~ledger.attempt.ChatResult` names that provider and lists the failed
attempts before it.

Which failures move on (decided once, by the error classes in
:mod:`ledger.errors`; this module never reads a status code)::

    what happened                           error_type          next route?
    HTTP 429                                rate_limited        yes  the quota is per provider
    HTTP 5xx (529 overloaded included)      server_error        yes  the provider is failing now
    connection refused/reset, DNS, EOF      transport           yes  no answer at all
    connect/read/write/pool timeout         timeout             yes  no answer in time
    2xx with an unusable body               server_error        yes  the provider misbehaved
    stream error before the first token     stream_interrupted  yes, if its code is transient
    any other 4xx (400 401 403 404 413 422) client_error        no   the request or the key is
                                                                     wrong; the next provider
                                                                     would fail too and burn quota
    stream error after the first token      stream_interrupted  no   the caller already has text

A non-transient error is raised at once, with the provider's message. When
every route failed transiently, :class:`~ledger.errors.AllProvidersFailed`
carries every attempt's error and a ``retry_after`` (the largest hint any
provider sent, else ``default_retry_after_s``), and turns itself into a
friendly HTTP 503 (``http_response()``).

Optional per-route retries (:class:`RetryPolicy`, off by default as in the
ADR) honour ``Retry-After`` up to a cap, back off with full jitter, and stop
at a deadline for the whole call: each attempt gets the time left as its
timeout, so a hanging provider cannot outlast the deadline (each phase of the
attempt, connect, write, every read, is capped; a server trickling bytes just
inside that cap can still overrun it by one read).

Every route's provider is resolved when the cascade is built, so a fallback
with no API key fails at construction, not under load when the primary first
answers 429.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Self, TypedDict, Unpack

from ledger.attempt import Call, ChatOptions, ChatResult, Filing, make_call
from ledger.client import AsyncClient, Client
from ledger.client_stream import AsyncChatStream, ChatStream
from ledger.errors import AllProvidersFailed, ProviderError, StreamInterrupted
from ledger.events import new_id


@dataclass(frozen=True, slots=True)
class Route:
    """One step of the chain: a provider name (see ``ledger providers``) and a model."""

    provider: str
    model: str


#: ADR-0014's deliberate two-level chain.
DEFAULT_CHAIN: Final = (
    Route("openai", "gpt-4o-mini"),
    Route("anthropic", "claude-haiku-4-5-20251001"),
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retries on the same route before moving on. The default (1 try) is the ADR's.

    ``tries_per_route``: attempts per route (1 = move on at the first failure).
    A ``Retry-After`` longer than ``max_retry_after_s`` moves on at once: with
    a fallback available, waiting that long helps nobody. ``deadline_s`` bounds
    the whole call, retries and fallbacks together.
    """

    tries_per_route: int = 1
    base_delay_s: float = 0.25
    max_delay_s: float = 4.0
    max_retry_after_s: float = 10.0
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if self.tries_per_route < 1:
            raise ValueError("tries_per_route must be at least 1")


class Plan:
    """The cascade's decisions for one call, free of I/O: shared by the sync and async
    cascades, and driven by the gateway (:mod:`ledger.gateway`), which sends and relays
    bytes itself but must fall back, give up and answer 503 exactly as they do."""

    def __init__(
        self,
        routes: Sequence[Route],
        policy: RetryPolicy,
        default_retry_after_s: float,
        rng: random.Random,
        clock: Callable[[], float],
    ) -> None:
        self.routes = routes
        self.policy = policy
        self.default_retry_after_s = default_retry_after_s
        self.rng = rng
        self.clock = clock
        self.started = clock()
        self.call_id = new_id()
        self.errors: list[ProviderError] = []
        self.attempt = 0
        self._route = 0
        self._tries = 0

    def next(self) -> Route | None:
        """The next route to try, or None when the chain or the deadline is spent."""
        if self._route >= len(self.routes) or self._remaining() <= 0:
            return None
        self.attempt += 1
        self._tries += 1
        return self.routes[self._route]

    def filing(self) -> Filing:
        """How the current attempt is filed: this call, its number, the chain's first route."""
        first = self.routes[0]
        return Filing(self.call_id, self.attempt, first.provider, first.model)

    def failed(self, exc: ProviderError) -> float:
        """Note a failure; raise it if no fallback may follow, else the seconds to wait."""
        self.errors.append(exc)
        delivered = isinstance(exc, StreamInterrupted) and exc.delivered
        if not exc.transient or delivered:
            raise exc
        if self._tries < self.policy.tries_per_route:
            delay = self._backoff(exc)
            if delay is not None and delay < self._remaining():
                return delay
        self._route += 1
        self._tries = 0
        return 0.0

    def exhausted(self, locale: str | None) -> AllProvidersFailed:
        hints = [e.retry_after for e in self.errors if e.retry_after is not None]
        retry_after = max(hints) if hints else self.default_retry_after_s
        return AllProvidersFailed(
            tuple(self.errors), retry_after=retry_after, call_id=self.call_id, locale=locale
        )

    def _backoff(self, exc: ProviderError) -> float | None:
        p = self.policy
        if exc.retry_after is not None:
            return exc.retry_after if exc.retry_after <= p.max_retry_after_s else None
        # Full jitter: spreads retries of many callers hit by the same outage.
        return self.rng.uniform(0, min(p.max_delay_s, p.base_delay_s * 2 ** (self._tries - 1)))

    def timeout(self) -> float | None:
        """The attempt's time bound: what is left of the deadline (None: no deadline)."""
        return None if self.policy.deadline_s is None else max(self._remaining(), 0.0)

    def _remaining(self) -> float:
        if self.policy.deadline_s is None:
            return float("inf")
        return self.policy.deadline_s - (self.clock() - self.started)


class CascadeSettings(TypedDict, total=False):
    """How a cascade falls back (the keyword arguments after ``routes``): see
    :class:`RetryPolicy`; ``default_retry_after_s`` is the hint when no provider sent
    one; ``seed`` makes the jitter repeatable; ``clock`` is a monotonic clock."""

    retry: RetryPolicy | None
    default_retry_after_s: float
    seed: int | None
    clock: Callable[[], float]


class _CascadeBase:
    def __init__(
        self,
        routes: Sequence[Route] = DEFAULT_CHAIN,
        *,
        retry: RetryPolicy | None = None,
        default_retry_after_s: float = 30.0,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not routes:
            raise ValueError("a cascade needs at least one route")
        self.routes = tuple(routes)
        self.retry = retry or RetryPolicy()
        self.default_retry_after_s = default_retry_after_s
        self._rng = random.Random(seed)  # jitter, not security
        self._clock = clock

    def _plan(self) -> Plan:
        return Plan(self.routes, self.retry, self.default_retry_after_s, self._rng, self._clock)


class Cascade(_CascadeBase):
    """``Cascade(client, routes).chat(messages, session_id=…, actor_id=…)``; see the module doc."""

    def __init__(
        self,
        client: Client,
        routes: Sequence[Route] = DEFAULT_CHAIN,
        **settings: Unpack[CascadeSettings],
    ) -> None:
        super().__init__(routes, **settings)
        self.client = client
        for route in self.routes:  # ProviderConfigurationError now, not at the first 429
            client.provider(route.provider)

    def chat(
        self, messages: Sequence[Mapping[str, Any]], **options: Unpack[ChatOptions]
    ) -> ChatResult:
        """One call through the chain. ``options``: see :class:`~ledger.attempt.ChatOptions`."""
        return self.run(make_call(messages, **options))

    def run(self, call: Call) -> ChatResult:
        """:meth:`chat` for a prepared :class:`~ledger.attempt.Call`: the result of the first
        route that answers, its ``failed_attempts`` listing the routes that failed first.

        Raises the first non-transient :class:`~ledger.errors.ProviderError` at once, or
        :class:`~ledger.errors.AllProvidersFailed` when every route failed transiently
        (or the deadline ran out); ``ValueError`` before sending for an unrecordable call.
        """
        plan = self._plan()
        while (route := plan.next()) is not None:
            try:
                result = self.client.attempt(
                    call,
                    provider=route.provider,
                    model=route.model,
                    timeout=plan.timeout(),
                    filing=plan.filing(),
                )
            except ProviderError as exc:
                if delay := plan.failed(exc):
                    time.sleep(delay)
                continue
            return replace(result, failed_attempts=tuple(plan.errors))
        raise plan.exhausted(call.locale)

    def stream(
        self, messages: Sequence[Mapping[str, Any]], **options: Unpack[ChatOptions]
    ) -> CascadeStream:
        """A streamed call: falls back until a route yields its first token, then commits."""
        return CascadeStream(self, make_call(messages, **options))


class _Committed:
    """The route a :class:`CascadeStream` committed to (shared with its generator, which
    must not reference the stream itself: that cycle would delay ``__del__`` to the GC)."""

    __slots__ = ("errors", "stream")

    def __init__(self) -> None:
        self.stream: ChatStream | None = None
        self.errors: tuple[ProviderError, ...] = ()


def _cascade_deltas(cascade: Cascade, call: Call, state: _Committed) -> Generator[str, None, None]:
    plan = cascade._plan()
    while (route := plan.next()) is not None:
        stream = cascade.client.attempt_stream(
            call,
            provider=route.provider,
            model=route.model,
            timeout=plan.timeout(),
            filing=plan.filing(),
        )
        try:
            stream.__enter__()
            first = next(stream, None)
        except ProviderError as exc:
            stream.close()
            if delay := plan.failed(exc):
                time.sleep(delay)
            continue
        state.stream, state.errors = stream, tuple(plan.errors)
        try:
            if first is not None:
                yield first
                # From here on an error cannot fall back: it reaches the caller.
                yield from stream
        finally:
            # A caller that stops early (close(), break, or dropping us) still gets the row.
            stream.abandon()
        return
    raise plan.exhausted(call.locale)


class CascadeStream:
    """Text deltas from the first route that starts answering; ``result`` once done.

    Nothing is sent until the first iteration. Stopping early, with ``close()``,
    ``with`` or by dropping the stream, records the committed attempt's row.
    """

    def __init__(self, cascade: Cascade, call: Call) -> None:
        self._state = _Committed()
        self._deltas: Generator[str, None, None] = _cascade_deltas(cascade, call, self._state)

    @property
    def result(self) -> ChatResult | None:
        """The answering route's result (with the failed attempts), once its stream ended."""
        stream = self._state.stream
        if stream is None or stream.result is None:
            return None
        return replace(stream.result, failed_attempts=self._state.errors)

    def __iter__(self) -> Iterator[str]:
        return self._deltas

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop reading; the committed attempt is recorded with what was seen."""
        self._deltas.close()
        if self._state.stream is not None:
            self._state.stream.close()


class AsyncCascade(_CascadeBase):
    """The asynchronous :class:`Cascade`, over an :class:`~ledger.client.AsyncClient`."""

    def __init__(
        self,
        client: AsyncClient,
        routes: Sequence[Route] = DEFAULT_CHAIN,
        **settings: Unpack[CascadeSettings],
    ) -> None:
        super().__init__(routes, **settings)
        self.client = client
        for route in self.routes:  # ProviderConfigurationError now, not at the first 429
            client.provider(route.provider)

    async def chat(
        self, messages: Sequence[Mapping[str, Any]], **options: Unpack[ChatOptions]
    ) -> ChatResult:
        """One call through the chain. ``options``: see :class:`~ledger.attempt.ChatOptions`."""
        return await self.run(make_call(messages, **options))

    async def run(self, call: Call) -> ChatResult:
        """The asynchronous :meth:`Cascade.run` (same result, same errors)."""
        plan = self._plan()
        while (route := plan.next()) is not None:
            try:
                result = await self.client.attempt(
                    call,
                    provider=route.provider,
                    model=route.model,
                    timeout=plan.timeout(),
                    filing=plan.filing(),
                )
            except ProviderError as exc:
                if delay := plan.failed(exc):
                    await asyncio.sleep(delay)
                continue
            return replace(result, failed_attempts=tuple(plan.errors))
        raise plan.exhausted(call.locale)

    async def stream(
        self, messages: Sequence[Mapping[str, Any]], **options: Unpack[ChatOptions]
    ) -> AsyncCascadeStream:
        """Open a streamed call: returns once a route has produced its first token."""
        return await AsyncCascadeStream.open(self, make_call(messages, **options))


class AsyncCascadeStream:
    """The asynchronous :class:`CascadeStream`: ``async for text in stream``."""

    def __init__(
        self, stream: AsyncChatStream, first: str | None, errors: tuple[ProviderError, ...]
    ) -> None:
        self._stream = stream
        self._first = first
        self._errors = errors

    @classmethod
    async def open(cls, cascade: AsyncCascade, call: Call) -> AsyncCascadeStream:
        plan = cascade._plan()
        while (route := plan.next()) is not None:
            stream = cascade.client.attempt_stream(
                call,
                provider=route.provider,
                model=route.model,
                timeout=plan.timeout(),
                filing=plan.filing(),
            )
            try:
                await stream.__aenter__()
                first = await anext(stream, None)
            except ProviderError as exc:
                await stream.aclose()
                if delay := plan.failed(exc):
                    await asyncio.sleep(delay)
                continue
            return cls(stream, first, tuple(plan.errors))
        raise plan.exhausted(call.locale)

    @property
    def result(self) -> ChatResult | None:
        """The answering route's result (with the failed attempts), once its stream ended."""
        result = self._stream.result
        return None if result is None else replace(result, failed_attempts=self._errors)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> str:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return await anext(self._stream)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop reading; the committed attempt is recorded with what was seen."""
        await self._stream.aclose()


__all__ = [
    "DEFAULT_CHAIN",
    "AllProvidersFailed",
    "AsyncCascade",
    "AsyncCascadeStream",
    "Cascade",
    "CascadeStream",
    "Plan",
    "RetryPolicy",
    "Route",
]
