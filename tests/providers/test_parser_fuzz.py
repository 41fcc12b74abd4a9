"""Property-based: no body, however broken, makes a parser raise or yield an unrecordable row."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.events import MAX_TOKENS
from ledger.providers import PROVIDERS, Provider
from ledger.providers.base import Parsed
from ledger.providers.openai_compat import OpenAIStyleProvider

PAYLOADS = Path(__file__).resolve().parent.parent / "fixtures" / "payloads"
ALL = [cls(api_key="k", base_url="http://127.0.0.1:9") for cls in PROVIDERS.values()]
#: Providers that also speak the Responses API (the OpenAI family).
RESPONSES = [p for p in ALL if isinstance(p, OpenAIStyleProvider)]
SEEDS = [p.read_bytes() for p in sorted(PAYLOADS.iterdir()) if p.suffix in {".json", ".sse"}]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "usage",
                    "prompt_tokens",
                    "completion_tokens",
                    "prompt_tokens_details",
                    "cached_tokens",
                    "choices",
                    "delta",
                    "content",
                    "error",
                    "code",
                    "model",
                    "id",
                    "provider",
                    "cost",
                    "x_groq",
                    "type",
                    "message",
                    "input_tokens",
                    "cache_read_input_tokens",
                    "usageMetadata",
                    "promptTokenCount",
                    "candidates",
                    "parts",
                    "text",
                    "finish_reason",
                    "status_code",
                    "object",
                    "output",
                    "response",
                    "status",
                    "incomplete_details",
                    "reason",
                    "input_tokens_details",
                    "output_tokens_details",
                    "reasoning_tokens",
                    "cache_write_tokens",
                ]
            ),
            inner,
            max_size=5,
        )
    ),
    max_leaves=25,
)

bodies = (
    st.binary(max_size=400)
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.tuples(st.sampled_from(SEEDS), st.integers(0, 4000), st.binary(max_size=8)).map(
        lambda t: t[0][: t[1]] + t[2]
    )
)


def check(parsed: Parsed) -> None:
    assert isinstance(parsed, Parsed)
    if parsed.usage is not None:
        u = parsed.usage
        for value in (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens):
            assert 0 <= value <= MAX_TOKENS
        assert u.cache_read_tokens <= u.input_tokens and u.cache_write_tokens <= u.input_tokens


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies, provider=st.sampled_from(ALL))
def test_whole_body_parsers_never_raise(body: bytes, provider: Provider) -> None:
    check(provider.parse_response(body))
    assert isinstance(provider.parse_error(500, body).message, str)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.lists(bodies, max_size=6),
    provider=st.sampled_from(ALL),
    split=st.integers(1, 50),
)
def test_stream_parsers_never_raise(events: list[bytes], provider: Provider, split: int) -> None:
    raw = b"".join(b"data: " + e + b"\n\n" for e in events) + b"event: error\ndata: {\n"
    parser = provider.stream_parser()
    for i in range(0, len(raw), split):
        assert all(isinstance(t, str) for t in parser.feed(raw[i : i + split]))
    check(parser.finish())


#: Responses API stream events: a real event type around arbitrary JSON.
response_events = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            [
                "response.created",
                "response.in_progress",
                "response.output_text.delta",
                "response.completed",
                "response.incomplete",
                "response.failed",
                "error",
                "response.reasoning_text.delta",
            ]
        ),
    },
    optional={"response": json_values, "delta": json_values, "error": json_values},
).map(lambda v: json.dumps(v).encode())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies | response_events, provider=st.sampled_from(RESPONSES))
def test_responses_body_parser_never_raises(body: bytes, provider: OpenAIStyleProvider) -> None:
    check(provider.parse_responses(body))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.lists(bodies | response_events, max_size=6),
    provider=st.sampled_from(RESPONSES),
    split=st.integers(1, 50),
    named=st.booleans(),
)
def test_responses_stream_parser_never_raises(
    events: list[bytes], provider: OpenAIStyleProvider, split: int, named: bool
) -> None:
    head = b"event: response.completed\n" if named else b""
    raw = b"".join(head + b"data: " + e + b"\n\n" for e in events) + b"event: error\ndata: {\n"
    parser = provider.responses_stream_parser()
    for i in range(0, len(raw), split):
        assert all(isinstance(t, str) for t in parser.feed(raw[i : i + split]))
    check(parser.finish())
