"""The client: wrap LLM calls, get content plus who answered, usage and cost, and one
ledger row per attempt.

::

    with Client() as client:
        result = client.chat([{"role": "user", "content": "Hi"}], model="openai/gpt-4o",
                             provider="openrouter", session_id="s-42", actor_id="planner")
        with client.stream(messages, model="gpt-4o-mini", provider="openai") as stream:
            for text in stream:
                print(text, end="")
        stream.result.usage

:meth:`Client.attempt` / :meth:`Client.attempt_stream` are the single-attempt
primitive (build, send, parse, record one row filed under the caller's
:class:`~ledger.attempt.Filing`); :meth:`Client.chat` is one
attempt under a fresh call id. A failed attempt raises a
:class:`~ledger.errors.ProviderError` whose ``event`` is the recorded row.

Degrade quietly in production, fail loudly in tests: with ``strict=False`` a
ledger failure or a parser bug is logged and the caller's call goes on; with
``strict=True`` it raises.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Self, Unpack

import httpx

from ledger.attempt import (
    Attempt,
    Call,
    ChatOptions,
    ChatResult,
    Filing,
    LazyRecorder,
    PolicyChoice,
    Prepared,
    build_event,
    check_model,
    cost_of,
    http_failure,
    in_band_failure,
    make_call,
    prepare,
    result_of,
)
from ledger.client_stream import AsyncChatStream, ChatStream, request_url
from ledger.clock import SYSTEM_CLOCK, Clock
from ledger.errors import (
    MalformedResponse,
    ProviderError,
    map_transport_errors,
)
from ledger.events import (
    Recorder,  # re-exported: ``ledger.client.Recorder`` is where callers find it
    UsageEvent,
    new_id,
)
from ledger.policies import PolicySource
from ledger.price_overrides import PriceBook, load_prices
from ledger.providers import Provider, make_provider
from ledger.providers.base import Parsed
from ledger.session_key import DEFAULT_PREFIX

if TYPE_CHECKING:
    from ledger.budgets.guard import BudgetGuard

__all__ = ["AsyncClient", "Client", "Recorder"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = httpx.Timeout(60.0, connect=10.0)


class _Base:
    def __init__(
        self,
        *,
        providers: Mapping[str, Provider] | Sequence[Provider] | None = None,
        ledger: Recorder | str | None = None,
        default_provider: str = "openai",
        session_prefix: str = DEFAULT_PREFIX,
        strict: bool = False,
        clock: Clock | None = None,
        guard: BudgetGuard | None = None,
        prices: PriceBook | None = None,
        policies: PolicySource | bool = True,
    ) -> None:
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        #: Price overrides for computed costs; None reads the nearest price file
        #: (ledger.price_overrides), so a bad one fails here, before any call.
        self.prices = prices if prices is not None else load_prices()
        #: Optional budget guard (ledger.budgets): consulted before each attempt is sent.
        self.guard = guard
        items = providers.values() if isinstance(providers, Mapping) else providers or ()
        self._providers: dict[str, Provider] = {p.name: p for p in items}
        self._sink = LazyRecorder(ledger)
        #: Routing policies (ledger.policies): True reads the ledger database's (when
        #: the ledger is a Ledger), False applies none.
        self._policies = PolicyChoice(policies, self._sink)
        self.default_provider = default_provider
        self.session_prefix = session_prefix
        self.strict = strict

    def _ms(self, since: float) -> float:
        return (self.clock.monotonic() - since) * 1000.0

    def provider(self, name: str) -> Provider:
        """The configured provider ``name``, built from the environment on first use."""
        if name not in self._providers:
            self._providers[name] = make_provider(name)
        return self._providers[name]

    def record(self, event: UsageEvent) -> UsageEvent:
        """Record ``event``; the event as stored (a value its row cannot hold repaired and
        named). A failure is logged (raised when ``strict``), never the caller's."""
        if self.guard is not None:
            self.guard.observe(event)  # the spend happened whether or not the ledger took it
        try:
            return self._sink.record(event)
        except Exception:
            if self.strict:
                raise
            log.exception("ledger: could not record attempt %s", event.event_id)
            return event

    def begin_attempt(self, prep: Prepared) -> None:
        """Journal that ``prep`` is about to be sent (its row if this process dies before
        recording it); a failure is logged (raised when ``strict``), never the caller's."""
        try:
            self._sink.begin_attempt(prep)
        except Exception:
            if self.strict:
                raise
            log.exception("ledger: could not journal the start of attempt %s", prep.event_id)

    def timeout_for(self, prep: Prepared) -> Any:
        """The httpx timeout for ``prep``: the client's own, each phase capped at
        ``prep.timeout`` when the attempt has a time bound of its own."""
        if prep.timeout is None:
            return httpx.USE_CLIENT_DEFAULT
        limit = max(prep.timeout, 0.001)
        base = self._http_timeout()
        return httpx.Timeout(
            connect=_cap(base.connect, limit),
            read=_cap(base.read, limit),
            write=_cap(base.write, limit),
            pool=_cap(base.pool, limit),
        )

    def _http_timeout(self) -> httpx.Timeout:
        raise NotImplementedError

    def _prepare(
        self,
        call: Call,
        *,
        provider: str | None,
        model: str,
        stream: bool,
        timeout: float | None = None,
        filing: Filing | None = None,
    ) -> Prepared:
        call.check(model=model)
        chosen = self.provider(provider or self.default_provider)
        if filing is None:
            target = Attempt(chosen, model, new_id(), 1, chosen.name, model)
        else:
            target = Attempt(
                chosen,
                model,
                filing.call_id,
                filing.attempt,
                filing.requested_provider,
                filing.requested_model,
            )
            if filing.requested_model is not model:
                check_model(filing.requested_model)
        policy = self._policies.policy_for(chosen, target.model)
        prep = prepare(
            call, target, stream=stream, session_prefix=self.session_prefix, policy=policy
        )
        prep.timeout = timeout
        if self.guard is not None:
            self.guard.before_send(prep, self.clock.now())  # BudgetExceeded: nothing is sent
        if prep.routing_order:  # however it got there: routing_order or extra_body
            log.warning(
                "provider.order=%s sent to %s: it turns OpenRouter's sticky routing off",
                prep.routing_order,
                chosen.name,
            )
        return prep

    def _parse(self, prep: Prepared, content: bytes) -> Parsed:
        try:
            return prep.target.provider.parse_response(content)
        except Exception as exc:  # parsers are total; this is a bug, never the caller's problem
            if self.strict:
                raise
            log.exception("ledger: %s parser failed", prep.target.provider.name)
            return Parsed(valid=False, problems=(f"parser bug: {type(exc).__name__}",))

    def _complete(
        self,
        prep: Prepared,
        status: int,
        content: bytes,
        headers: Mapping[str, str],
        latency: float,
    ) -> ChatResult:
        """Turn a whole answer into a result, or record the failure and raise it."""
        provider = prep.target.provider
        if not 200 <= status < 300:
            body = provider.parse_error(status, content)
            self.raise_failure(
                prep, http_failure(provider, status, body, headers), latency, None, status
            )
        parsed = self._parse(prep, content)
        if parsed.error is not None:
            exc = in_band_failure(
                provider, parsed.error, http_status=status, streamed=False, delivered=False
            )
            self.raise_failure(prep, exc, latency, parsed, status)
        if not parsed.valid:
            exc2 = MalformedResponse(
                f"{provider.name} answered HTTP {status} with an unusable body "
                f"({'; '.join(parsed.problems) or 'unknown shape'})",
                provider=provider.name,
                http_status=status,
            )
            self.raise_failure(prep, exc2, latency, parsed, status)
        event = self.attempt_event(prep, latency, None, parsed, None, status, streamed=False)
        return result_of(prep, parsed, event, latency_ms=latency, ttft_ms=None)

    def attempt_event(
        self,
        prep: Prepared,
        latency: float | None,
        ttft: float | None,
        parsed: Parsed | None,
        error: ProviderError | None,
        status: int | None,
        *,
        streamed: bool,
        abandoned: bool = False,
        cut_short: bool = False,
    ) -> UsageEvent:
        """Build the attempt's row and record it (the stream calls this too)."""
        event = build_event(
            prep,
            latency_ms=latency,
            ttft_ms=ttft,
            parsed=parsed,
            error=error,
            http_status=status,
            streamed=streamed,
            cost=cost_of(prep, parsed, self.prices),
            abandoned=abandoned,
            cut_short=cut_short,
        )
        event = self.record(event)
        if error is not None:
            error.event = event
        return event

    def raise_failure(
        self,
        prep: Prepared,
        exc: ProviderError,
        latency: float | None,
        parsed: Parsed | None,
        status: int | None,
        *,
        streamed: bool = False,
    ) -> NoReturn:
        """Record the failed attempt's row, then raise its error."""
        self.attempt_event(prep, latency, None, parsed, exc, status, streamed=streamed)
        raise exc


def _cap(value: float | None, limit: float) -> float:
    return limit if value is None else min(value, limit)


class Client(_Base):
    """Synchronous client over one pooled ``httpx.Client`` (connections are reused).

    ``providers`` configures provider instances (keys, base URLs); a provider
    not configured is built from its environment variables on first use.
    ``ledger`` is a :class:`Recorder`, a database URL, or None for the
    process-wide default ledger. ``policies``: the routing policies applied to
    OpenRouter calls (:mod:`ledger.policies`); True, the default, reads those in the
    ledger's database (none when ``ledger`` is another recorder), False applies none.
    """

    def __init__(
        self,
        *,
        providers: Mapping[str, Provider] | Sequence[Provider] | None = None,
        ledger: Recorder | str | None = None,
        default_provider: str = "openai",
        session_prefix: str = DEFAULT_PREFIX,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        http_client: httpx.Client | None = None,
        strict: bool = False,
        clock: Clock | None = None,
        guard: BudgetGuard | None = None,
        prices: PriceBook | None = None,
        policies: PolicySource | bool = True,
    ) -> None:
        super().__init__(
            providers=providers,
            ledger=ledger,
            default_provider=default_provider,
            session_prefix=session_prefix,
            strict=strict,
            clock=clock,
            guard=guard,
            prices=prices,
            policies=policies,
        )
        self._owns_http = http_client is None
        self.http = http_client or httpx.Client(timeout=timeout)

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        provider: str | None = None,
        **options: Unpack[ChatOptions],
    ) -> ChatResult:
        """One call, one attempt. ``options``: see :class:`~ledger.attempt.ChatOptions`."""
        return self.attempt(make_call(messages, **options), provider=provider, model=model)

    def stream(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        provider: str | None = None,
        **options: Unpack[ChatOptions],
    ) -> ChatStream:
        """One streamed call; see :class:`ChatStream`."""
        return self.attempt_stream(make_call(messages, **options), provider=provider, model=model)

    def attempt(
        self,
        call: Call,
        *,
        provider: str | None,
        model: str,
        timeout: float | None = None,
        filing: Filing | None = None,
    ) -> ChatResult:
        """Send one attempt and record its row, filed as ``filing`` says (None: a new
        call, attempt 1, requested as this target).

        ``timeout`` (seconds) caps each phase of this attempt (connect, write, each read,
        pool wait) below the client's own timeouts: a cascade passes its remaining
        deadline. Raises ``ValueError`` before sending for what the ledger could not
        record, :class:`~ledger.errors.ProviderError` (row recorded) when the attempt fails.
        """
        prep = self._prepare(
            call, provider=provider, model=model, stream=False, timeout=timeout, filing=filing
        )
        prep.started_at = self.clock.now()
        self.begin_attempt(prep)
        t0 = self.clock.monotonic()
        try:
            with map_transport_errors(prep.target.provider.name):
                response = self.http.request(
                    prep.method,
                    request_url(prep.url),
                    headers=prep.headers,
                    content=prep.content,
                    timeout=self.timeout_for(prep),
                )
        except ProviderError as exc:
            self.raise_failure(prep, exc, self._ms(t0), None, None)
        latency = self._ms(t0)
        return self._complete(
            prep, response.status_code, response.content, response.headers, latency
        )

    def attempt_stream(
        self,
        call: Call,
        *,
        provider: str | None,
        model: str,
        timeout: float | None = None,
        filing: Filing | None = None,
    ) -> ChatStream:
        """One streamed attempt, filed like :meth:`attempt`; nothing is sent until the
        stream is entered or iterated. Its row is recorded when it ends, fails, is
        closed, or is dropped unfinished (see :class:`~ledger.client_stream.ChatStream`)."""
        prep = self._prepare(
            call, provider=provider, model=model, stream=True, timeout=timeout, filing=filing
        )
        return ChatStream(self, prep)

    def _http_timeout(self) -> httpx.Timeout:
        return self.http.timeout

    def close(self) -> None:
        """Close the HTTP connections, if this client opened them (not a caller's client)."""
        if self._owns_http:
            self.http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_Base):
    """The asynchronous :class:`Client`, over one pooled ``httpx.AsyncClient``."""

    def __init__(
        self,
        *,
        providers: Mapping[str, Provider] | Sequence[Provider] | None = None,
        ledger: Recorder | str | None = None,
        default_provider: str = "openai",
        session_prefix: str = DEFAULT_PREFIX,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        http_client: httpx.AsyncClient | None = None,
        strict: bool = False,
        clock: Clock | None = None,
        guard: BudgetGuard | None = None,
        prices: PriceBook | None = None,
        policies: PolicySource | bool = True,
    ) -> None:
        super().__init__(
            providers=providers,
            ledger=ledger,
            default_provider=default_provider,
            session_prefix=session_prefix,
            strict=strict,
            clock=clock,
            guard=guard,
            prices=prices,
            policies=policies,
        )
        self._owns_http = http_client is None
        self.http = http_client or httpx.AsyncClient(timeout=timeout)

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        provider: str | None = None,
        **options: Unpack[ChatOptions],
    ) -> ChatResult:
        """One call, one attempt. ``options``: see :class:`~ledger.attempt.ChatOptions`."""
        return await self.attempt(make_call(messages, **options), provider=provider, model=model)

    def stream(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        provider: str | None = None,
        **options: Unpack[ChatOptions],
    ) -> AsyncChatStream:
        """One streamed call: ``async with client.stream(…) as s: async for text in s``."""
        return self.attempt_stream(make_call(messages, **options), provider=provider, model=model)

    async def attempt(
        self,
        call: Call,
        *,
        provider: str | None,
        model: str,
        timeout: float | None = None,
        filing: Filing | None = None,
    ) -> ChatResult:
        """The asynchronous :meth:`Client.attempt` (same filing, timeout and errors)."""
        prep = self._prepare(
            call, provider=provider, model=model, stream=False, timeout=timeout, filing=filing
        )
        prep.started_at = self.clock.now()
        self.begin_attempt(prep)
        t0 = self.clock.monotonic()
        try:
            with map_transport_errors(prep.target.provider.name):
                response = await self.http.request(
                    prep.method,
                    request_url(prep.url),
                    headers=prep.headers,
                    content=prep.content,
                    timeout=self.timeout_for(prep),
                )
        except ProviderError as exc:
            self.raise_failure(prep, exc, self._ms(t0), None, None)
        latency = self._ms(t0)
        return self._complete(
            prep, response.status_code, response.content, response.headers, latency
        )

    def attempt_stream(
        self,
        call: Call,
        *,
        provider: str | None,
        model: str,
        timeout: float | None = None,
        filing: Filing | None = None,
    ) -> AsyncChatStream:
        """The asynchronous :meth:`Client.attempt_stream`."""
        prep = self._prepare(
            call, provider=provider, model=model, stream=True, timeout=timeout, filing=filing
        )
        return AsyncChatStream(self, prep)

    def _http_timeout(self) -> httpx.Timeout:
        return self.http.timeout

    async def aclose(self) -> None:
        """Close the HTTP connections, if this client opened them."""
        if self._owns_http:
            await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
