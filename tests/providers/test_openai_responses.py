"""The Responses API parsers: text, usage, errors and terminal states, whole and streamed.

The recorded fixtures (tests/fixtures/payloads/*_responses_*) are checked against
SOURCES.md by test_provider_payloads.py; here are the behaviours around them. Bodies
built inline follow the shapes of the installed ``openai`` SDK's types
(``Response``, ``ResponseUsage``, ``ResponseError``, ``ResponseErrorEvent``,
``ResponseFailedEvent``, ``ResponseIncompleteEvent``).
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from ledger.providers import OpenAIProvider, OpenRouterProvider, make_provider
from ledger.providers.base import Parsed, Usage
from ledger.providers.openai_compat import OpenAIStyleProvider

PAYLOADS = Path(__file__).resolve().parent.parent / "fixtures" / "payloads"
OPENAI = OpenAIProvider(api_key="k", base_url="http://127.0.0.1:9")
OPENROUTER = OpenRouterProvider(api_key="k", base_url="http://127.0.0.1:9")


def sse(*events: dict[str, Any], named: bool = True) -> bytes:
    """A stream framed as OpenAI frames it (``event:`` + ``data:``), or data-only."""
    out = []
    for event in events:
        head = f"event: {event['type']}\n" if named else ""
        out.append(f"{head}data: {json.dumps(event)}\n\n")
    return "".join(out).encode()


def stream(provider: OpenAIStyleProvider, raw: bytes, step: int = 5) -> tuple[list[str], Parsed]:
    parser = provider.responses_stream_parser()
    pieces: list[str] = []
    for i in range(0, len(raw), step):
        pieces += parser.feed(raw[i : i + step])
    return pieces, parser.finish()


def response(**fields: Any) -> dict[str, Any]:
    body = {"id": "resp_1", "object": "response", "model": "gpt-4.1", "status": "completed"}
    body.update(fields)
    return body


USAGE = {
    "input_tokens": 2006,
    "input_tokens_details": {"cached_tokens": 1920, "cache_write_tokens": 64},
    "output_tokens": 300,
    "output_tokens_details": {"reasoning_tokens": 256},
    "total_tokens": 2306,
}


def test_every_openai_family_provider_parses_the_responses_api() -> None:
    names = ["openai", "azure_openai", "openrouter", "groq", "openai_compatible"]
    for name in names:
        provider = make_provider(name, api_key="k", base_url="http://127.0.0.1:9")
        assert isinstance(provider, OpenAIStyleProvider)
        body = json.dumps(response(usage=USAGE)).encode()
        assert provider.parse_responses(body).usage is not None


def test_cached_and_reasoning_tokens_stay_inside_input_and_output() -> None:
    parsed = OPENAI.parse_responses(json.dumps(response(usage=USAGE)).encode())
    assert parsed.usage == Usage(
        input_tokens=2006,
        output_tokens=300,
        cache_read_tokens=1920,
        cache_write_tokens=64,
        reasoning_tokens=256,
    )
    assert parsed.valid and parsed.error is None and parsed.problems == ()


def test_streamed_text_reaches_the_caller_as_it_arrives() -> None:
    raw = (PAYLOADS / "openai_responses_stream_moderation_real.sse").read_bytes()
    pieces, parsed = stream(OPENAI, raw)
    assert pieces == ["Paris", "."]
    assert parsed.content == "Paris." and parsed.finish_reason == "completed"
    assert parsed.problems == ()


def test_raw_reasoning_deltas_are_not_answer_text() -> None:
    raw = (PAYLOADS / "openrouter_responses_stream_gpt_oss_reasoning.sse").read_bytes()
    pieces, parsed = stream(OPENROUTER, raw)
    assert pieces == ["4"] and parsed.content == "4"
    assert parsed.provider_cost_usd == Decimal("0.0000113")


def test_built_in_tool_usage_is_not_mistaken_for_model_usage() -> None:
    tool_usage = {"image_gen": {"input_tokens": 999, "output_tokens": 999, "total_tokens": 1998}}
    body = response(tool_usage=tool_usage, usage={"input_tokens": 5, "output_tokens": 2})
    usage = OPENAI.parse_responses(json.dumps(body).encode()).usage
    assert usage is not None and (usage.input_tokens, usage.output_tokens) == (5, 2)


def test_whole_body_text_joins_output_text_parts_only() -> None:
    output = [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
        {"type": "function_call", "name": "f", "arguments": "{}"},
        {
            "type": "message",
            "content": [
                {"type": "output_text", "text": "Hello"},
                {"type": "refusal", "refusal": "no"},
                {"type": "output_text", "text": " world"},
            ],
        },
    ]
    parsed = OPENAI.parse_responses(json.dumps(response(output=output, usage=USAGE)).encode())
    assert parsed.content == "Hello world"


def test_a_failed_response_is_an_in_band_error_with_its_transience() -> None:
    failed = response(
        status="failed",
        error={"code": "server_error", "message": "The model failed"},
        usage=None,
    )
    parsed = OPENAI.parse_responses(json.dumps(failed).encode())
    assert parsed.error is not None and parsed.error.transient
    assert (parsed.error.code, parsed.error.message) == ("server_error", "The model failed")
    assert parsed.usage is None and parsed.finish_reason == "failed"
    bad_prompt = response(status="failed", error={"code": "invalid_prompt", "message": "no"})
    error = OPENAI.parse_responses(json.dumps(bad_prompt).encode()).error
    assert error is not None and not error.transient


def test_a_failed_status_without_details_is_still_an_error() -> None:
    parsed = OPENAI.parse_responses(json.dumps(response(status="failed")).encode())
    assert parsed.error is not None


def test_an_incomplete_response_keeps_its_usage_and_says_why() -> None:
    body = response(
        status="incomplete",
        incomplete_details={"reason": "max_output_tokens"},
        usage=USAGE,
    )
    parsed = OPENAI.parse_responses(json.dumps(body).encode())
    assert parsed.error is None and parsed.usage is not None
    assert parsed.finish_reason == "max_output_tokens"


def test_response_failed_event_ends_the_stream_with_the_usage_seen() -> None:
    raw = sse(
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": response(status="in_progress"),
        },
        {"type": "response.output_text.delta", "sequence_number": 1, "delta": "Par"},
        {
            "type": "response.failed",
            "sequence_number": 2,
            "response": response(
                status="failed",
                error={"code": "rate_limit_exceeded", "message": "slow down"},
                usage={"input_tokens": 10, "output_tokens": 1},
            ),
        },
    )
    pieces, parsed = stream(OPENAI, raw)
    assert pieces == ["Par"] and parsed.content == "Par"
    assert parsed.error is not None and parsed.error.transient
    assert parsed.usage is not None and parsed.usage.input_tokens == 10


@pytest.mark.parametrize("named", [True, False])
def test_error_event_is_surfaced(named: bool) -> None:
    raw = sse(
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": response(status="in_progress"),
        },
        {
            "type": "error",
            "code": "ERR_SOMETHING",
            "message": "Something went wrong",
            "param": None,
        },
        named=named,
    )
    _, parsed = stream(OPENAI, raw)
    assert parsed.error is not None and parsed.error.message == "Something went wrong"
    assert parsed.generation_id == "resp_1" and parsed.usage is None


def test_error_event_nested_under_error_is_surfaced() -> None:
    event = {"type": "error", "error": {"code": "server_error", "message": "stream disconnected"}}
    _, parsed = stream(OPENAI, sse(event))
    assert parsed.error is not None and parsed.error.message == "stream disconnected"
    assert parsed.error.transient


def test_response_incomplete_event_is_not_an_error() -> None:
    raw = sse(
        {"type": "response.output_text.delta", "delta": "Once upon"},
        {
            "type": "response.incomplete",
            "response": response(
                status="incomplete",
                incomplete_details={"reason": "max_output_tokens"},
                usage={"input_tokens": 3, "output_tokens": 16},
            ),
        },
    )
    _, parsed = stream(OPENAI, raw)
    assert parsed.error is None and parsed.finish_reason == "max_output_tokens"
    assert parsed.usage is not None and parsed.usage.output_tokens == 16


def test_a_stream_cut_before_its_terminal_event_says_so() -> None:
    raw = sse(
        {"type": "response.created", "response": response(status="in_progress")},
        {"type": "response.output_text.delta", "delta": "Hi"},
    )
    _, parsed = stream(OPENAI, raw)
    assert parsed.content == "Hi" and parsed.usage is None and parsed.error is None
    assert any("terminal" in p for p in parsed.problems)


def test_final_text_is_used_when_no_delta_arrived() -> None:
    output = [{"type": "message", "content": [{"type": "output_text", "text": "whole"}]}]
    raw = sse({"type": "response.completed", "response": response(output=output, usage=USAGE)})
    pieces, parsed = stream(OPENAI, raw)
    assert pieces == [] and parsed.content == "whole"


def test_chat_and_responses_bodies_are_not_confused() -> None:
    chat = (PAYLOADS / "openai_chat_cached_real.json").read_bytes()
    assert not OPENAI.parse_responses(chat).valid
    responses = (PAYLOADS / "openai_responses_simple_real.json").read_bytes()
    assert not OPENAI.parse_response(responses).valid
    assert OPENAI.parse_responses(responses).valid


@pytest.mark.parametrize(
    "body", [b"", b"not json", b"[1, 2]", b"\xff\xfe", b'{"usage": {"input_tokens": -5}}']
)
def test_broken_bodies_give_an_answer_not_a_crash(body: bytes) -> None:
    parsed = OPENAI.parse_responses(body)
    assert isinstance(parsed, Parsed)
    if parsed.usage is not None:
        assert parsed.usage.input_tokens == 0 and parsed.problems
