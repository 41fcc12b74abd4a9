"""One attempt at one provider, minus the I/O: prepare the request, then turn what
came back (parsed body, error, timings) into the result and its usage row.

The sync and async clients differ only in how they send bytes; everything
else is here, pure, so the cascade (one ``call_id``, many attempts) and the
SDK instrumentation can reuse it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Final

from ledger.errors import (
    ProviderError,
    ProviderHTTPError,
    StreamInterrupted,
    classify_status,
    http_error,
    parse_retry_after,
    redact,
)
from ledger.events import MAX_TAGS_BYTES, UsageEvent
from ledger.pricing import Cost, attempt_cost
from ledger.providers.base import ChatRequest, ErrorBody, InBandError, Parsed, Provider, Usage
from ledger.schema import STRING_LIMITS
from ledger.session_key import DEFAULT_PREFIX, session_key

_MAX_MESSAGE: Final = 500
_NO_USAGE: Final = Usage()


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

    def check(self) -> None:
        """Reject, before anything is sent, what the ledger could not record (caller bugs)."""
        for name in ("session_id", "actor_id", "locale", "routing_sort"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, str) or len(value) > STRING_LIMITS[name]
            ):
                raise ValueError(f"{name} must be a string of at most {STRING_LIMITS[name]} chars")
        if self.routing_order is not None:
            joined = ",".join(self.routing_order)
            if len(joined) > STRING_LIMITS["routing_order"]:
                raise ValueError("routing_order is too long to record")
        if self.tags is not None:
            try:
                encoded = json.dumps(dict(self.tags), allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"tags must be JSON-serialisable labels ({exc})") from None
            if len(encoded) > MAX_TAGS_BYTES:
                raise ValueError(f"tags exceed {MAX_TAGS_BYTES} characters of JSON")


@dataclass(frozen=True, slots=True)
class Attempt:
    """Where one attempt goes and how it is filed: given by the caller (or the cascade)."""

    provider: Provider
    model: str
    call_id: str
    attempt: int
    requested_provider: str
    requested_model: str


@dataclass(slots=True)
class Prepared:
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
    call: Call, target: Attempt, *, stream: bool, session_prefix: str = DEFAULT_PREFIX
) -> Prepared:
    """Build the request: the sticky key only where the capability is true, routing only
    where the provider routes."""
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
    content = json.dumps(http.body, separators=(",", ":"), ensure_ascii=False).encode()
    return Prepared(
        call=call,
        target=target,
        request=request,
        method=http.method,
        url=http.url,
        headers=http.headers,
        content=content,
        session_key=key,
        routing_sort=sort,
        routing_order=",".join(order) if order else None,
    )


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


def cost_of(prep: Prepared, parsed: Parsed | None) -> Cost:
    if parsed is None:
        return Cost()
    provider = prep.target.provider
    models = [m for m in (parsed.model, prep.target.model) if m]
    cost = Cost()
    for model in dict.fromkeys(models):  # the served model first, then the one asked for
        cost = attempt_cost(
            usage=parsed.usage,
            model=model,
            reported=parsed.provider_cost_usd,
            provider=provider.name,
            provider_id=provider.prices_provider_id,
            api_url=provider.base_url,
            at=prep.started_at,
        )
        if cost.usd is not None:
            break
    return cost


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
) -> UsageEvent:
    """The attempt's ``token_usage`` row (contract §1)."""
    call, target = prep.call, prep.target
    usage = parsed.usage if parsed is not None and parsed.usage is not None else _NO_USAGE
    return UsageEvent(
        call_id=target.call_id,
        attempt=target.attempt,
        started_at=prep.started_at,
        latency_ms=latency_ms,
        ttft_ms=ttft_ms,
        session_id=call.session_id,
        actor_id=call.actor_id,
        session_key=prep.session_key,
        requested_provider=target.requested_provider,
        requested_model=target.requested_model,
        provider=target.provider.name,
        model=clean(parsed.model, "model") if parsed else None,
        upstream=clean(parsed.upstream, "upstream") if parsed else None,
        generation_id=clean(parsed.generation_id, "generation_id") if parsed else None,
        routing_sort=prep.routing_sort,
        routing_order=prep.routing_order,
        status="error" if error is not None else "ok",
        error_type=error.error_type if error is not None else None,
        http_status=http_status if http_status is not None and 100 <= http_status <= 599 else None,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        cost_usd=cost.usd,
        cost_source=cost.source,
        streamed=streamed,
        paused=call.paused,
        locale=call.locale,
        tags=dict(call.tags) if call.tags is not None else None,
    )


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
