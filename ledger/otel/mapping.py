"""A GenAI client span from any common instrumentation -> the usage event ``record()`` takes.

Spellings read, first found wins (current semconv first, then older and vendor ones):

==================  ==============================================================
provider            ``gen_ai.provider.name``, ``gen_ai.system`` (semconv before 1.37,
                    OpenLLMetry, OpenLIT), ``ledger.requested_provider``
operation           ``gen_ai.operation.name``, ``llm.request.type`` (OpenLLMetry)
requested model     ``gen_ai.request.model`` (else the response model)
response model      ``gen_ai.response.model``
input tokens        ``gen_ai.usage.input_tokens``, ``gen_ai.usage.prompt_tokens``
                    (semconv before 1.27, OpenLLMetry), ``llm.usage.prompt_tokens``
output tokens       ``gen_ai.usage.output_tokens``, ``gen_ai.usage.completion_tokens``,
                    ``llm.usage.completion_tokens``
cache reads         ``gen_ai.usage.cache_read.input_tokens``,
                    ``gen_ai.usage.cache_read_input_tokens`` (OpenLLMetry),
                    ``llm.usage.cache_read_input_tokens``
cache writes        ``gen_ai.usage.cache_creation.input_tokens``,
                    ``gen_ai.usage.cache_creation_input_tokens`` (OpenLLMetry),
                    ``gen_ai.usage.cache_write.input_tokens``
reasoning tokens    ``gen_ai.usage.reasoning.output_tokens``,
                    ``gen_ai.usage.reasoning_tokens`` (OpenLLMetry, OpenLIT)
session             ``gen_ai.conversation.id``, ``session.id``,
                    ``traceloop.association.properties.session_id``
agent               ``gen_ai.agent.id``, ``gen_ai.agent.name``
response id         ``gen_ai.response.id``
streamed            ``ledger.streamed``, ``gen_ai.request.stream``, ``llm.is_streaming``
                    (OpenLLMetry), ``gen_ai.request.is_stream`` (OpenLIT)
cost                ``ledger.cost_usd``; else the project's price table (as the
                    metering transport prices); else ``gen_ai.usage.cost`` (OpenLIT)
==================  ==============================================================

plus the exporter's own ``ledger.*`` attributes, so the ledger's spans come
back as the rows they were. ``usage_reported`` is whether the span carried
token counts at all (the ledger's own spans say it in ``ledger.usage_reported``).
What is not there stays NULL (or 0 for token counts, the contract's default).

A span is *skipped* (with a reason) when it is not a model call: no GenAI
provider or model attribute, or an agent/tool/workflow span (whose usage, if
any, sums its children's and would count them twice). It is *rejected* when
it is a model call whose values the ledger cannot store (a negative token
count, a 300-character session id...).

Input tokens follow the contract (cache reads and writes included), as the
conventions ask; an instrumentation that reports Anthropic's raw
``input_tokens`` (cache excluded) shows it by cache counts above the input
count, and those are added back.

Identity: ``event_id`` is ``ledger.event_id`` when the span carries a valid
one, else a UUID5 of the trace and span id, so a span received twice (an
exporter's retry) is one row.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final, cast

from ledger.events import MAX_TOKENS, CostSource, ErrorType, UsageEvent, to_row
from ledger.otel import attributes as attr
from ledger.otel.spans import STATUS_ERROR, Span
from ledger.pricing import attempt_cost
from ledger.providers import PROVIDERS
from ledger.providers.base import Usage

#: Namespace of the event ids derived from trace and span ids.
SPAN_NAMESPACE: Final = uuid.UUID("6f0b7c1e-5d0a-4d43-9a55-2f1a9c7e0b11")

PROVIDER_KEYS: Final = ("gen_ai.provider.name", "gen_ai.system", attr.REQUESTED_PROVIDER)
OPERATION_KEYS: Final = ("gen_ai.operation.name", "llm.request.type")
INPUT_KEYS: Final = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.usage.prompt_tokens",
)
OUTPUT_KEYS: Final = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.usage.completion_tokens",
)
CACHE_READ_KEYS: Final = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "llm.usage.cache_read_input_tokens",
)
CACHE_WRITE_KEYS: Final = (
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.cache_creation_input_tokens",
    "gen_ai.usage.cache_write.input_tokens",
)
REASONING_KEYS: Final = ("gen_ai.usage.reasoning.output_tokens", "gen_ai.usage.reasoning_tokens")
SESSION_KEYS: Final = (
    "gen_ai.conversation.id",
    "session.id",
    "traceloop.association.properties.session_id",
)
AGENT_KEYS: Final = ("gen_ai.agent.id", "gen_ai.agent.name")
STREAM_KEYS: Final = (
    attr.STREAMED,
    "gen_ai.request.stream",
    "llm.is_streaming",
    "gen_ai.request.is_stream",
)
#: Operations that are not one call to a model.
NOT_MODEL_CALLS: Final = frozenset(
    {"invoke_agent", "create_agent", "execute_tool", "workflow", "task", "agent", "tool"}
)
#: Older semconv and vendor spellings of gen_ai.provider.name -> our provider names.
PROVIDER_ALIASES: Final = {
    **attr.PROVIDERS_BY_NAME,
    "az.ai.openai": "azure_openai",
    "vertex_ai": "gemini",
    "gcp.vertex_ai": "gemini",
    "gcp.gen_ai": "gemini",
    "google.ai.studio": "gemini",
}
_UUID: Final = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)
_LOWEST_NS: Final = 946_684_800 * 10**9  # 2000-01-01: earlier start times are not real


@dataclass(frozen=True, slots=True)
class Skipped:
    """Why a span gave no row; ``rejected`` when it was a model call the ledger cannot store."""

    reason: str
    rejected: bool = False


class _Invalid(ValueError):
    """A model-call span with a value the ledger cannot store."""


def _first(attributes: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        value = attributes.get(key)
        if value is not None and value != "":
            return value
    return None


def _text(attributes: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    value = _first(attributes, keys)
    if value is None:
        return None
    if isinstance(value, list):  # llm.request.type and a few others arrive as one-item arrays
        value = value[0] if len(value) == 1 else None
    return value if isinstance(value, str) else None


def _count(attributes: Mapping[str, Any], keys: tuple[str, ...]) -> int:
    value = _first(attributes, keys)
    if value is None:
        return 0
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        key = next(k for k in keys if attributes.get(k) is not None)
        raise _Invalid(f"{key} = {value!r:.40}: not a token count")
    return value


def _flag(attributes: Mapping[str, Any], keys: tuple[str, ...]) -> bool:
    value = _first(attributes, keys)
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _error_type(span: Span) -> ErrorType | None:
    """Our error class for a failed span, from ``error.type`` and the HTTP status."""
    raw = str(span.attributes.get(attr.ERROR_TYPE) or "").lower()
    status = span.attributes.get(attr.HTTP_STATUS)
    code = status if isinstance(status, int) else int(raw) if raw.isdigit() else None
    if code == 429 or "ratelimit" in raw or "rate_limit" in raw:
        return "rate_limited"
    if "timeout" in raw or "timedout" in raw:
        return "timeout"
    if (code is not None and code >= 500) or "internalserver" in raw or "unavailable" in raw:
        return "server_error"
    if "connection" in raw or "transport" in raw:
        return "transport"
    if code is not None and 400 <= code < 500:
        return "client_error"
    return cast(ErrorType, raw) if raw in _ERROR_TYPES else None


_ERROR_TYPES: Final = frozenset(
    {"rate_limited", "server_error", "transport", "timeout", "client_error", "stream_interrupted"}
)


def _provider(span: Span) -> str | None:
    name = _text(span.attributes, PROVIDER_KEYS)
    if name is None:
        return None
    server = span.attributes.get("server.address")
    if isinstance(server, str) and server.endswith("openrouter.ai"):
        return "openrouter"  # the OpenAI SDK pointed at OpenRouter still says "openai"
    name = name.strip().lower()  # OpenLLMetry says "Anthropic"; semconv values are lowercase
    return PROVIDER_ALIASES.get(name, name)


def _usage(attributes: Mapping[str, Any]) -> Usage:
    usage = Usage(
        input_tokens=_count(attributes, INPUT_KEYS),
        output_tokens=_count(attributes, OUTPUT_KEYS),
        cache_read_tokens=_count(attributes, CACHE_READ_KEYS),
        cache_write_tokens=_count(attributes, CACHE_WRITE_KEYS),
        reasoning_tokens=_count(attributes, REASONING_KEYS),
    )
    if max(usage.cache_read_tokens, usage.cache_write_tokens) > usage.input_tokens:
        # Anthropic's raw input count, cache excluded: the contract's input includes both.
        total = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        if total > MAX_TOKENS:
            raise _Invalid("input and cache token counts overflow")
        usage = dataclasses.replace(usage, input_tokens=total)
    return usage


def _decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        return None
    return amount if amount.is_finite() and amount >= 0 else None


def _cost(
    span: Span, usage: Usage, reported: bool, model: str | None, provider: str
) -> tuple[Decimal | None, CostSource | None]:
    if attr.EVENT_ID in span.attributes:  # the ledger's own span: no ledger.cost_usd = unknown
        own = _decimal(span.attributes.get(attr.COST_USD))
        if own is None:
            return None, None
        source = span.attributes.get(attr.COST_SOURCE)
        return own, "incomplete" if source == "incomplete" else (
            "provider" if source == "provider" else "computed"
        )
    if reported and model:
        cls = PROVIDERS.get(provider)
        priced = attempt_cost(
            usage=usage,
            model=model,
            reported=None,
            provider=provider,
            provider_id=cls.prices_provider_id if cls is not None else None,
            at=dt.datetime.fromtimestamp(span.start_ns / 1e9, dt.UTC),
        )
        if priced.usd is not None:
            return priced.usd, priced.source
    openlit = _decimal(span.attributes.get("gen_ai.usage.cost"))
    return (openlit, "computed") if openlit is not None else (None, None)


def event_id_for(span: Span) -> str:
    """The row's idempotency key: ``ledger.event_id`` if valid, else UUID5(trace, span)."""
    own = span.attributes.get(attr.EVENT_ID)
    if isinstance(own, str) and _UUID.fullmatch(own):
        return own.lower()
    return str(uuid.uuid5(SPAN_NAMESPACE, f"{span.trace_id}:{span.span_id}"))


def _optional_int(value: Any, low: int, high: int) -> int | None:
    return value if type(value) is int and low <= value <= high else None


def _ledger_fields(attributes: Mapping[str, Any], event_id: str) -> dict[str, Any]:
    """What the ledger's own exporter put on the span (round trip), else defaults."""
    call_id = attributes.get(attr.CALL_ID)
    ttft = attributes.get(attr.TTFT_MS)
    attempt = _optional_int(attributes.get(attr.ATTEMPT), 0, 32_767)
    return {
        "call_id": call_id
        if isinstance(call_id, str) and _UUID.fullmatch(call_id)
        else str(uuid.uuid5(SPAN_NAMESPACE, f"call:{event_id}")),
        "attempt": 1 if attempt is None else attempt,
        "upstream": _text(attributes, (attr.UPSTREAM,)),
        "routing_sort": _text(attributes, (attr.ROUTING_SORT,)),
        "routing_order": _text(attributes, (attr.ROUTING_ORDER,)),
        "response_cache_hit": _flag(attributes, (attr.RESPONSE_CACHE_HIT,)),
        "ttft_ms": float(ttft) if isinstance(ttft, int | float) and ttft >= 0 else None,
    }


def to_event(span: Span) -> UsageEvent | Skipped:
    """The usage event of a GenAI client span, or why there is none (see the module doc)."""
    a = span.attributes
    operation = _text(a, OPERATION_KEYS)
    kind = _text(a, ("traceloop.span.kind",))
    if (operation or "").lower() in NOT_MODEL_CALLS or (kind or "").lower() in NOT_MODEL_CALLS:
        return Skipped(f"not a model call (operation {operation or kind})")
    provider = _provider(span)
    requested = _text(a, ("gen_ai.request.model",))
    model = _text(a, ("gen_ai.response.model",))
    if provider is None and requested is None and model is None:
        return Skipped("not a GenAI span (no gen_ai provider or model)")
    if requested is None and model is None:
        return Skipped("a GenAI span without a model", rejected=True)
    if span.start_ns < _LOWEST_NS or span.start_ns > 2**62:
        return Skipped("no usable start time", rejected=True)
    try:
        usage = _usage(a)
    except _Invalid as exc:
        return Skipped(str(exc), rejected=True)
    provider = provider or "unknown"
    requested_provider = _text(a, (attr.REQUESTED_PROVIDER,)) or provider
    # The ledger's own spans name the call's first model apart from the attempt's.
    requested_model = _text(a, (attr.REQUESTED_MODEL,)) or requested or model or ""
    failed = span.status_code == STATUS_ERROR or a.get(attr.ERROR_TYPE) is not None
    reported = any(_first(a, keys) is not None for keys in (INPUT_KEYS, OUTPUT_KEYS))
    cost, source = _cost(span, usage, reported, model or requested, provider)
    event_id = event_id_for(span)
    event = UsageEvent(
        event_id=event_id,
        started_at=dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        + dt.timedelta(microseconds=span.start_ns // 1000),
        latency_ms=(span.end_ns - span.start_ns) / 1e6 if span.end_ns >= span.start_ns else None,
        requested_provider=requested_provider,
        requested_model=requested_model,
        attempt_model=requested if requested != requested_model else None,
        provider=provider,
        model=model,
        generation_id=_text(a, (attr.RESPONSE_ID,)),
        session_id=_text(a, SESSION_KEYS),
        actor_id=_text(a, AGENT_KEYS),
        status="error" if failed else "ok",
        error_type=_error_type(span) if failed else None,
        http_status=_optional_int(a.get(attr.HTTP_STATUS), 100, 599),
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        cost_usd=cost,
        cost_source=source,
        streamed=_flag(a, STREAM_KEYS),
        # Counts the span does not carry are not the provider's report (contract: honest rows).
        usage_reported=a[attr.USAGE_REPORTED] is True if attr.USAGE_REPORTED in a else reported,
        **_ledger_fields(a, event_id),
    )
    try:
        to_row(event)
    except ValueError as exc:
        return Skipped(str(exc), rejected=True)
    return event
