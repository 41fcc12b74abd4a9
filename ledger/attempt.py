"""One attempt at one provider, minus the I/O: prepare the request, then turn what
came back (parsed body, error, timings) into the result and its usage row.

The sync and async clients differ only in how they send bytes; everything
else is here, pure, so the cascade (one ``call_id``, many attempts) and the
SDK instrumentation can reuse it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final, Protocol, TypedDict, Unpack, runtime_checkable

from ledger.compact_json import compact_encoder
from ledger.errors import (
    ProviderError,
    ProviderHTTPError,
    StreamInterrupted,
    classify_status,
    http_error,
    parse_retry_after,
    redact,
)
from ledger.events import (
    ABANDONED,
    Arm,
    ErrorType,
    InvalidField,
    Recorder,
    UsageEvent,
    check_tags,
    check_text,
    new_id,
    recordable,
)
from ledger.policies import Policy, PolicySource, apply_to, arm_for
from ledger.price_overrides import NO_OVERRIDES, PriceBook
from ledger.pricing import Cost, attempt_cost
from ledger.providers.base import ChatRequest, ErrorBody, InBandError, Parsed, Provider, Usage
from ledger.providers.router_metadata import as_column
from ledger.schema import STRING_LIMITS
from ledger.session_key import DEFAULT_PREFIX, session_key

_MAX_MESSAGE: Final = 500
_NO_USAGE: Final = Usage()


# a caller's body may hold a cycle: that stays ValueError, not RecursionError
_encode_body: Final = compact_encoder(check_circular=True)


@dataclass(frozen=True, slots=True)
class Call:
    """What the caller asks, independent of which provider serves it."""

    messages: Sequence[Mapping[str, Any]]
    max_tokens: int | None = None
    temperature: float | None = None
    session_id: str | None = None
    actor_id: str | None = None
    locale: str | None = None
    tags: Mapping[str, Any] | None = None
    routing_sort: str | None = None
    routing_order: Sequence[str] | None = None
    extra_body: Mapping[str, Any] | None = None
    paused: bool = False

    def check(self, *, model: str | None = None) -> None:
        """Reject, before anything is sent, what the ledger could not record (caller bugs).

        The rules are :func:`ledger.events.to_row`'s own (reused, not copied), so a
        call that passes here never has its row refused after the provider was paid.
        ``model``: the requested model, checked as the ``requested_model`` column.
        """
        for name in ("session_id", "actor_id", "locale", "routing_sort"):
            value = getattr(self, name)
            if value is not None:
                check_text(name, value, STRING_LIMITS[name])
        if self.routing_order is not None:
            order = self.routing_order
            if isinstance(order, str) or not all(isinstance(o, str) and o for o in order):
                raise ValueError("routing_order must be a sequence of provider names")
            check_text("routing_order", ",".join(order), STRING_LIMITS["routing_order"])
        if self.tags is not None:
            if not isinstance(self.tags, Mapping):
                raise ValueError("tags must be a mapping of JSON-serialisable labels")
            check_tags(dict(self.tags))
        if not isinstance(self.paused, bool):
            raise ValueError("paused must be a bool")
        if model is not None:
            check_model(model)


class ChatOptions(TypedDict, total=False):
    """The options of ``chat(messages, model=…, **options)`` and ``stream(…)`` on the
    clients and cascades: the fields of :class:`Call` beside ``messages``."""

    max_tokens: int | None
    temperature: float | None
    session_id: str | None
    actor_id: str | None
    locale: str | None
    tags: Mapping[str, Any] | None
    routing_sort: str | None
    routing_order: Sequence[str] | None
    extra_body: Mapping[str, Any] | None
    paused: bool


def check_model(model: Any, column: str = "requested_model") -> None:
    """Raise ``ValueError`` unless ``model`` is a non-empty model name the ledger can record."""
    if isinstance(model, str) and not model:
        raise ValueError(f"{column} must be a non-empty model name")
    check_text(column, model, STRING_LIMITS[column])


@dataclass(frozen=True, slots=True)
class Filing:
    """How one attempt of a call is filed in the ledger, given by whoever drives the
    call's attempts (the cascade, the gateway): the call's id, this attempt's number
    (1, 2, …), and the provider and model the call asked for first."""

    call_id: str
    attempt: int
    requested_provider: str
    requested_model: str


@dataclass(frozen=True, slots=True)
class Attempt:
    """Where one attempt goes and how it is filed: given by the caller (or the cascade)."""

    provider: Provider
    model: str
    call_id: str
    attempt: int
    requested_provider: str
    requested_model: str


@runtime_checkable
class AttemptJournal(Protocol):
    """A recorder that journals an attempt's start, so an attempt whose process dies
    before its row is recorded is still stored (``Ledger.begin_attempt``)."""

    def begin_attempt(self, event: UsageEvent) -> None: ...


@runtime_checkable
class PolicyHolder(Protocol):
    """A recorder whose database holds routing policies (``Ledger.policies``)."""

    @property
    def policies(self) -> PolicySource: ...


class LazyRecorder:
    """The ledger given as a :class:`Recorder`, a database URL, or None (the process's
    default ledger), opened on first use so building a client or transport is free."""

    def __init__(self, spec: Recorder | str | None) -> None:
        self._spec = spec
        self._recorder: Recorder | None = None if isinstance(spec, str | None) else spec
        self._journal: AttemptJournal | None = None
        if self._recorder is not None and isinstance(self._recorder, AttemptJournal):
            self._journal = self._recorder

    def get(self) -> Recorder:
        if self._recorder is None:
            from ledger.store.ledger import Ledger, default_ledger

            spec = self._spec
            ledger = Ledger(spec) if isinstance(spec, str) else default_ledger()
            self._recorder = self._journal = ledger
        return self._recorder

    def record(self, event: UsageEvent) -> UsageEvent:
        """Record ``event`` and return it as stored: an attempt that happened is never
        lost to a value its row cannot hold, which is repaired and named instead
        (:func:`ledger.events.recordable`; only then, so the usual event is checked once)."""
        recorder = self.get()
        try:
            recorder.record(event)
        except InvalidField:
            event = recordable(event)
            recorder.record(event)
        return event

    def begin_attempt(self, prep: Prepared) -> None:
        """Journal that ``prep`` is being sent, when the recorder journals (a Ledger does)."""
        self.get()
        if self._journal is not None:
            self._journal.begin_attempt(_sent(prep))

    def policies(self) -> PolicySource | None:
        """The routing policies of the recorder's database (a Ledger's), else None."""
        recorder = self.get()
        return recorder.policies if isinstance(recorder, PolicyHolder) else None


class PolicyChoice:
    """The routing policies a client or transport applies: those given, those of its
    ledger's database (``True``, found on first use), or none (``False``)."""

    def __init__(self, choice: PolicySource | bool, sink: LazyRecorder) -> None:
        self._source: PolicySource | None = None if isinstance(choice, bool) else choice
        self._find = choice is True
        self._sink = sink

    def policy_for(self, provider: Provider, model: str) -> Policy | None:
        """The policy for ``model``'s attempts at ``provider`` (None where it does not route)."""
        if not provider.capabilities.provider_routing:
            return None
        if self._find:
            self._find = False
            self._source = self._sink.policies()
        return self._source.policy_for(model) if self._source is not None else None


def make_call(messages: Sequence[Mapping[str, Any]], **options: Unpack[ChatOptions]) -> Call:
    """The :class:`Call` for ``chat(messages, **options)``; ``TypeError`` for an unknown option."""
    return Call(messages=messages, **options)


@dataclass(slots=True)
class Prepared:
    """One attempt ready to send: the encoded request and what its row will say was sent.

    ``session_key``, ``routing_sort`` and ``routing_order`` are read back from the
    final body (see :func:`sent_values`). ``timeout`` (seconds) bounds this attempt
    alone, e.g. by a cascade's remaining deadline; None keeps the client's timeouts.
    """

    call: Call
    target: Attempt
    request: ChatRequest
    method: str
    url: str
    headers: dict[str, str]
    content: bytes
    session_key: str | None
    routing_sort: str | None
    routing_order: str | None
    started_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    timeout: float | None = None
    #: The attempt's row's id, fixed before sending: the journaled start
    #: (``Ledger.begin_attempt``) and the row itself share it.
    event_id: str = field(default_factory=new_id)
    #: The routing policy it was sent under and its session's arm (None: no policy).
    policy_id: int | None = None
    arm: Arm | None = None


@dataclass(frozen=True, slots=True)
class ChatResult:
    """What a successful attempt returns: the content, who answered, usage and cost."""

    content: str | None
    provider: str
    model: str | None
    upstream: str | None
    generation_id: str | None
    usage: Usage | None
    cost_usd: Decimal | None
    cost_source: str | None
    finish_reason: str | None
    latency_ms: float
    ttft_ms: float | None
    event: UsageEvent
    problems: tuple[str, ...] = ()
    #: Attempts that failed before this one answered (a cascade's fallbacks), in order.
    failed_attempts: tuple[ProviderError, ...] = ()


def prepare(
    call: Call,
    target: Attempt,
    *,
    stream: bool,
    session_prefix: str = DEFAULT_PREFIX,
    policy: Policy | None = None,
) -> Prepared:
    """Build the request: the sticky key only where the capability is true, routing only
    where the provider routes. ``policy`` (for ``target.model``) is applied where the
    provider routes: the session's arm is drawn from the key sent, else the session's
    own key (sent or not, a conversation keeps its arm), else the call id; the
    treatment arm's body carries the policy's provider fields."""
    provider = target.provider
    caps = provider.capabilities
    key = None
    if caps.sticky_session and call.session_id:
        key = session_key(call.session_id, call.actor_id, prefix=session_prefix)
    sort = call.routing_sort if caps.provider_routing else None
    order = tuple(call.routing_order) if caps.provider_routing and call.routing_order else None
    request = ChatRequest(
        model=target.model,
        messages=call.messages,
        max_tokens=call.max_tokens,
        temperature=call.temperature,
        stream=stream,
        session_key=key,
        routing_sort=sort,
        routing_order=order,
        extra_body=call.extra_body,
    )
    http = provider.build_request(request)
    arm: Arm | None = None
    if policy is not None and caps.provider_routing:
        unit = provider.sent_session_key(http.body) or (
            session_key(call.session_id, call.actor_id, prefix=session_prefix)
            if call.session_id
            else target.call_id
        )
        arm = arm_for(policy.id, unit, policy.holdout_share)
        apply_to(http.body, policy, arm, provider)
    sent_key, sent_sort, sent_order = sent_values(provider, http.body)
    content = _encode_body(http.body).encode()
    return Prepared(
        call=call,
        target=target,
        request=request,
        method=http.method,
        url=http.url,
        headers=http.headers,
        content=content,
        session_key=sent_key,
        routing_sort=sent_sort,
        routing_order=sent_order,
        policy_id=policy.id if arm is not None and policy is not None else None,
        arm=arm,
    )


def sent_values(
    provider: Provider, body: Mapping[str, Any]
) -> tuple[str | None, str | None, str | None]:
    """``(session_key, routing_sort, routing_order)`` as the final ``body`` carries them.

    Read from the body about to be sent, not from what we meant to send:
    ``extra_body`` is merged last and may replace the key or add ``provider.order``
    (contract §1: ``session_key`` is the key *actually sent*). A value the ledger
    could not record raises ``ValueError`` here, before anything is sent.
    """
    caps = provider.capabilities
    key = sort = order = None
    if caps.sticky_session:
        raw_key = provider.sent_session_key(body)
        if raw_key is not None:
            check_text("session_key", raw_key, STRING_LIMITS["session_key"])
            key = raw_key or None
    if caps.provider_routing:
        raw_sort, raw_order = provider.sent_routing(body)
        if raw_sort is not None:
            check_text("routing_sort", raw_sort, STRING_LIMITS["routing_sort"])
            sort = raw_sort or None
        if raw_order is not None:
            if not isinstance(raw_order, list) or not all(isinstance(o, str) for o in raw_order):
                raise ValueError("provider.order must be a list of provider names")
            order = ",".join(raw_order) or None
            if order is not None:
                check_text("routing_order", order, STRING_LIMITS["routing_order"])
    return key, sort, order


def clean(value: str | None, column: str) -> str | None:
    """A provider-supplied string the ledger will accept: valid UTF-8, no NUL, cut to size."""
    if value is None:
        return None
    if not value.isascii():
        value = value.encode("utf-8", "replace").decode("utf-8")
    value = value.replace("\x00", "")
    return value[: STRING_LIMITS[column]] or None


def http_failure(
    provider: Provider, status: int, body: ErrorBody, headers: Mapping[str, str]
) -> ProviderHTTPError:
    """The typed error for a non-2xx answer, its message free of secrets."""
    retry = parse_retry_after(headers)
    message = redact(body.message[:_MAX_MESSAGE], provider.secrets)
    return http_error(
        status,
        message,
        provider=provider.name,
        retry_after=retry if retry is not None else body.retry_after,
        code=body.code,
        upstream=body.upstream if provider.capabilities.reports_upstream else None,
    )


def in_band_failure(
    provider: Provider, error: InBandError, *, http_status: int, streamed: bool, delivered: bool
) -> ProviderError:
    """The typed error for an error reported inside a 2xx body or stream."""
    message = redact(error.message[:_MAX_MESSAGE], provider.secrets)
    if streamed:
        return StreamInterrupted(
            f"{provider.name} stream ended with an error: {message}",
            provider=provider.name,
            http_status=http_status,
            code=error.code,
            transient=error.transient,
            delivered=delivered,
        )
    exc = http_error(error.http_status or 502, message, provider=provider.name, code=error.code)
    exc.http_status = http_status
    exc.transient = classify_status(error.http_status)[1] if error.http_status else error.transient
    return exc


def cost_of(prep: Prepared, parsed: Parsed | None, prices: PriceBook = NO_OVERRIDES) -> Cost:
    """The attempt's cost. Only the model that served the call is priced: the one
    the response names, else (a response naming none) the one asked for. Pricing
    the requested model instead of an unpriced served one would invent a figure
    (a ``:free`` model asked for, a paid one served, read as a $0 call)."""
    if parsed is None:
        return Cost()
    provider = prep.target.provider
    return attempt_cost(
        usage=parsed.usage,
        model=parsed.model or prep.target.model,
        reported=parsed.provider_cost_usd,
        provider=provider.name,
        provider_id=provider.prices_provider_id,
        api_url=provider.base_url,
        at=prep.started_at,
        overrides=prices,
    )


def build_event(
    prep: Prepared,
    *,
    latency_ms: float | None,
    ttft_ms: float | None,
    parsed: Parsed | None,
    error: ProviderError | None,
    http_status: int | None,
    streamed: bool,
    cost: Cost,
    abandoned: bool = False,
    cut_short: bool = False,
) -> UsageEvent:
    """The attempt's ``token_usage`` row (contract §1).

    ``abandoned``: the caller stopped reading the stream before it ended (and no
    error was seen): an ``error`` row of type ``abandoned``. ``cut_short``: the body
    ended before it was complete (abandoned, or the connection broke). Either way
    the usage seen so far is recorded with ``usage_reported`` false, as it is when
    the provider reported none.

    The attempt happened (and may be paid for), so its row is never refused: a value
    the ledger cannot store as it came (the provider's ``model`` or ``generation_id``
    past its column's size, a cost past ``numeric(20, 10)``…) is cut or dropped and
    named in the ``ledger_repaired`` tag when it is recorded (:meth:`LazyRecorder.record`).
    """
    usage = parsed.usage if parsed is not None and parsed.usage is not None else _NO_USAGE
    reported = (
        parsed is not None
        and parsed.usage is not None
        and not parsed.usage_partial
        and not (cut_short or abandoned)
    )
    failed = error is not None or abandoned
    error_type: ErrorType | None = (
        error.error_type if error is not None else ABANDONED if abandoned else None
    )
    event = _sent(prep)
    event.latency_ms, event.ttft_ms = latency_ms, ttft_ms
    # The provider's own strings, as they came: recording cuts and flags what its row
    # cannot hold (LazyRecorder.record).
    event.model = parsed.model or None if parsed else None
    event.upstream = _upstream(parsed, error) or None
    event.generation_id = parsed.generation_id or None if parsed else None
    event.status, event.error_type = ("error" if failed else "ok"), error_type
    event.http_status = (
        http_status if http_status is not None and 100 <= http_status <= 599 else None
    )
    event.input_tokens, event.output_tokens = usage.input_tokens, usage.output_tokens
    event.cache_read_tokens = usage.cache_read_tokens
    event.cache_write_tokens = usage.cache_write_tokens
    event.reasoning_tokens = usage.reasoning_tokens
    event.cost_usd, event.cost_source = cost.usd, cost.source
    event.streamed, event.usage_reported = streamed, reported
    event.usage_details = usage.details()
    event.router_attempts = as_column(parsed.router_attempts) if parsed is not None else None
    event.finish_reason = parsed.finish_reason if parsed is not None else None
    return event


def _sent(prep: Prepared) -> UsageEvent:
    """The attempt's row as far as it is known when the request goes out."""
    call, target = prep.call, prep.target
    return UsageEvent(
        event_id=prep.event_id,
        call_id=target.call_id,
        attempt=target.attempt,
        started_at=prep.started_at,
        session_id=call.session_id,
        actor_id=call.actor_id,
        session_key=prep.session_key,
        requested_provider=target.requested_provider,
        requested_model=target.requested_model,
        provider=target.provider.name,
        routing_sort=prep.routing_sort,
        routing_order=prep.routing_order,
        status="ok",
        streamed=prep.request.stream,
        paused=call.paused,
        locale=call.locale,
        tags=dict(call.tags) if call.tags is not None else None,
        policy_id=prep.policy_id,
        arm=prep.arm,
        attempt_model=None if target.model == target.requested_model else target.model,
        base_url=target.provider.base_url,
    )


def _upstream(parsed: Parsed | None, error: ProviderError | None) -> str | None:
    # A failed attempt's upstream comes from the error body when the response named none
    # (OpenRouter names the upstream that failed): per-upstream error rates need it.
    if parsed is not None and parsed.upstream is not None:
        return parsed.upstream
    return error.upstream if error is not None else None


def result_of(
    prep: Prepared, parsed: Parsed, event: UsageEvent, *, latency_ms: float, ttft_ms: float | None
) -> ChatResult:
    return ChatResult(
        content=parsed.content,
        provider=prep.target.provider.name,
        model=event.model,
        upstream=event.upstream,
        generation_id=event.generation_id,
        usage=parsed.usage,
        cost_usd=event.cost_usd,
        cost_source=event.cost_source,
        finish_reason=parsed.finish_reason,
        latency_ms=latency_ms,
        ttft_ms=ttft_ms,
        event=event,
        problems=parsed.problems,
    )
