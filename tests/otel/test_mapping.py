"""GenAI client spans in every spelling the common instrumentations use -> usage events."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pytest

from ledger.events import UsageEvent
from ledger.otel.mapping import SPAN_NAMESPACE, Skipped, to_event
from ledger.otel.spans import Span

START = 1_796_040_000_123_456_000  # 2026-11-30 12:00:00.123456 UTC
TRACE, SPAN_ID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"


def span(attributes: dict[str, Any], **changes: Any) -> Span:
    values: dict[str, Any] = {
        "trace_id": TRACE,
        "span_id": SPAN_ID,
        "name": "chat gpt-4o-mini",
        "start_ns": START,
        "end_ns": START + 1_500_000_000,
        "attributes": attributes,
    }
    values.update(changes)
    return Span(**values)


def event(attributes: dict[str, Any], **changes: Any) -> UsageEvent:
    result = to_event(span(attributes, **changes))
    assert isinstance(result, UsageEvent), result
    return result


#: opentelemetry-instrumentation-openai-v2 (current semconv).
OPENAI_V2 = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": "gpt-4o-mini",
    "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
    "gen_ai.response.id": "chatcmpl-1",
    "gen_ai.usage.input_tokens": 1200,
    "gen_ai.usage.output_tokens": 80,
    "gen_ai.conversation.id": "s-1",
    "server.address": "api.openai.com",
}
#: OpenLLMetry / traceloop (gen_ai.system, prompt/completion tokens, underscore cache names).
TRACELOOP = {
    "llm.request.type": "chat",
    "gen_ai.system": "Anthropic",
    "gen_ai.request.model": "claude-haiku-4-5",
    "gen_ai.response.model": "claude-haiku-4-5-20251001",
    "gen_ai.usage.prompt_tokens": 3000,
    "gen_ai.usage.completion_tokens": 250,
    "gen_ai.usage.cache_read_input_tokens": 2800,
    "gen_ai.usage.cache_creation_input_tokens": 100,
    "llm.usage.total_tokens": 3250,
    "llm.is_streaming": True,
    "traceloop.association.properties.session_id": "s-2",
}
#: OpenLIT (gen_ai.system, its own reasoning and cost names).
OPENLIT = {
    "gen_ai.operation.name": "chat",
    "gen_ai.system": "openai",
    "gen_ai.request.model": "some-private-model",
    "gen_ai.usage.input_tokens": 500,
    "gen_ai.usage.output_tokens": 700,
    "gen_ai.usage.reasoning_tokens": 600,
    "gen_ai.usage.cost": 0.0042,
    "gen_ai.request.is_stream": False,
    "gen_ai.agent.name": "coder",
}


def test_openai_v2_spelling() -> None:
    e = event(OPENAI_V2)
    assert (e.provider, e.requested_provider, e.requested_model, e.model) == (
        "openai",
        "openai",
        "gpt-4o-mini",
        "gpt-4o-mini-2024-07-18",
    )
    assert (e.input_tokens, e.output_tokens, e.cache_read_tokens) == (1200, 80, 0)
    assert (e.session_id, e.generation_id, e.status, e.streamed) == (
        "s-1",
        "chatcmpl-1",
        "ok",
        False,
    )
    assert e.started_at == dt.datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=dt.UTC)
    assert e.latency_ms == 1500.0
    assert e.cost_source == "computed" and e.cost_usd is not None and e.cost_usd > 0
    assert e.actor_id is None and e.upstream is None and e.http_status is None


def test_traceloop_spelling_with_underscore_cache_names() -> None:
    e = event(TRACELOOP)
    assert e.provider == "anthropic"
    assert (e.input_tokens, e.output_tokens) == (3000, 250)
    assert (e.cache_read_tokens, e.cache_write_tokens) == (2800, 100)
    assert (e.session_id, e.streamed) == ("s-2", True)


def test_anthropic_raw_input_count_gets_its_cache_tokens_back() -> None:
    raw = {**TRACELOOP, "gen_ai.usage.prompt_tokens": 12}
    e = event(raw)
    assert e.input_tokens == 12 + 2800 + 100
    assert e.cache_read_tokens == 2800


def test_openlit_spelling_with_its_own_cost_when_the_model_is_unpriced() -> None:
    e = event(OPENLIT)
    assert (e.input_tokens, e.output_tokens, e.reasoning_tokens) == (500, 700, 600)
    assert (e.cost_usd, e.cost_source) == (Decimal("0.0042"), "computed")
    assert e.actor_id == "coder"


def test_current_names_win_over_old_ones() -> None:
    both = {
        **OPENAI_V2,
        "gen_ai.system": "old",
        "gen_ai.usage.prompt_tokens": 1,
        "gen_ai.usage.cache_read.input_tokens": 30,
        "gen_ai.usage.cache_read_input_tokens": 1,
        "gen_ai.usage.reasoning.output_tokens": 7,
        "gen_ai.usage.reasoning_tokens": 1,
    }
    e = event(both)
    assert (e.provider, e.input_tokens, e.cache_read_tokens, e.reasoning_tokens) == (
        "openai",
        1200,
        30,
        7,
    )


def test_openai_sdk_pointed_at_openrouter_is_openrouter() -> None:
    e = event({**OPENAI_V2, "server.address": "openrouter.ai"})
    assert e.provider == "openrouter"


def test_integers_arrive_as_strings_and_floats_too() -> None:
    e = event(
        {**OPENAI_V2, "gen_ai.usage.input_tokens": "1200", "gen_ai.usage.output_tokens": 80.0}
    )
    assert (e.input_tokens, e.output_tokens) == (1200, 80)


@pytest.mark.parametrize(
    ("error_type", "http_status", "expected"),
    [
        ("openai.RateLimitError", None, "rate_limited"),
        ("429", None, "rate_limited"),
        ("timeout", None, "timeout"),
        ("InternalServerError", 500, "server_error"),
        ("APIConnectionError", None, "transport"),
        ("BadRequestError", 400, "client_error"),
        ("SomethingElse", None, None),
    ],
)
def test_failed_span_status_and_error_class(
    error_type: str, http_status: int | None, expected: str | None
) -> None:
    attributes: dict[str, Any] = {**OPENAI_V2, "error.type": error_type}
    attributes.pop("gen_ai.usage.input_tokens")
    attributes.pop("gen_ai.usage.output_tokens")
    if http_status is not None:
        attributes["http.response.status_code"] = http_status
    e = event(attributes, status_code=2)
    assert (e.status, e.error_type, e.http_status) == ("error", expected, http_status)
    assert (e.input_tokens, e.cost_usd) == (0, None)  # no usage reported: unknown, not $0


def test_event_id_is_derived_from_trace_and_span_ids() -> None:
    first, again = event(OPENAI_V2), event(OPENAI_V2)
    assert first.event_id == again.event_id == str(uuid.uuid5(SPAN_NAMESPACE, f"{TRACE}:{SPAN_ID}"))
    other = event(OPENAI_V2, span_id="b7ad6b7169203332")
    assert other.event_id != first.event_id


@pytest.mark.parametrize(
    ("attributes", "reason"),
    [
        ({"http.request.method": "POST"}, "not a GenAI span"),
        ({**OPENAI_V2, "gen_ai.operation.name": "invoke_agent"}, "not a model call"),
        ({**OPENAI_V2, "gen_ai.operation.name": "execute_tool"}, "not a model call"),
        ({**TRACELOOP, "traceloop.span.kind": "workflow"}, "not a model call"),
    ],
)
def test_spans_that_are_not_model_calls_are_skipped_not_rejected(
    attributes: dict[str, Any], reason: str
) -> None:
    result = to_event(span(attributes))
    assert isinstance(result, Skipped) and not result.rejected
    assert result.reason.startswith(reason)


@pytest.mark.parametrize(
    ("attributes", "reason"),
    [
        ({**OPENAI_V2, "gen_ai.usage.input_tokens": -5}, "gen_ai.usage.input_tokens = -5"),
        ({**OPENAI_V2, "gen_ai.usage.output_tokens": "lots"}, "gen_ai.usage.output_tokens"),
        ({**OPENAI_V2, "gen_ai.usage.input_tokens": 2**64}, "not a token count"),
        ({**OPENAI_V2, "gen_ai.conversation.id": "x" * 300}, "session_id"),
        ({**OPENAI_V2, "gen_ai.request.model": "a\x00b"}, "NUL"),
        ({"gen_ai.provider.name": "openai"}, "a GenAI span without a model"),
    ],
)
def test_model_calls_the_ledger_cannot_store_are_rejected_with_the_reason(
    attributes: dict[str, Any], reason: str
) -> None:
    result = to_event(span(attributes))
    assert isinstance(result, Skipped) and result.rejected
    assert reason in result.reason


def test_a_span_without_a_real_start_time_is_rejected() -> None:
    result = to_event(span(OPENAI_V2, start_ns=0, end_ns=0))
    assert isinstance(result, Skipped) and result.rejected
