"""OpenRouter's router metadata and generation attempts, read from the documented shapes.

The metadata objects are OpenRouter's own doc examples
(tests/fixtures/payloads/router_metadata/SOURCES.md), put where the docs say they are
delivered: the top level of a non-streamed body, the final chunk of a stream before
``[DONE]``, Anthropic's ``message_stop``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from ledger.providers import make_provider
from ledger.providers.anthropic import MessageStreamParser
from ledger.providers.base import ChatRequest, Parsed
from ledger.providers.openai_compat import OpenAIProvider, OpenRouterProvider
from ledger.providers.router_metadata import (
    RouterAttempt,
    as_column,
    attempts_in,
    parse_router_metadata,
    provider_responses,
)

PAYLOADS = Path(__file__).resolve().parent.parent / "fixtures" / "payloads"
HERE = PAYLOADS / "router_metadata"


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


DOC_SHAPE = _json(HERE / "openrouter_metadata_doc_response_shape.json")
OPENAPI_EXAMPLE = _json(HERE / "openrouter_metadata_openapi_example.json")
#: A fallback in the ``RouterAttempt`` schema's shape (provider, model, status): no doc
#: example shows a failed attempt, so this one is the schema filled in.
FALLBACK = {
    **DOC_SHAPE,
    "attempt": 2,
    "summary": "available=2, selected=Azure",
    "endpoints": {
        "total": 2,
        "available": [
            {"provider": "OpenAI", "model": "openai/gpt-4o-mini", "selected": False},
            {"provider": "Azure", "model": "openai/gpt-4o-mini", "selected": True},
        ],
    },
    "attempts": [
        {"provider": "OpenAI", "model": "openai/gpt-4o-mini", "status": 502},
        {"provider": "Azure", "model": "openai/gpt-4o-mini", "status": 200},
    ],
}


def _provider() -> OpenRouterProvider:
    return OpenRouterProvider(api_key="k", base_url="http://127.0.0.1:1")


def test_the_docs_response_shape_names_one_attempt_that_served() -> None:
    found = parse_router_metadata(DOC_SHAPE)
    assert found is not None
    assert found.attempts == (RouterAttempt("OpenAI", 200, None),)
    assert (found.selected, found.strategy, found.attempt) == ("OpenAI", "direct", 1)
    assert found.generation_time_ms is None  # not in the guide's example


def test_without_an_attempts_list_the_first_attempt_served_the_selected_endpoint() -> None:
    # The OpenAPI example has no ``attempts`` (optional: "when the router retried").
    found = parse_router_metadata(OPENAPI_EXAMPLE)
    assert found is not None and found.attempts == (RouterAttempt("OpenAI", 200),)
    # A later attempt served and the list is missing: who failed before is unknown.
    later = parse_router_metadata({**OPENAPI_EXAMPLE, "attempt": 3})
    assert later is not None and later.attempts is None and later.selected == "OpenAI"


def test_a_fallback_lists_the_failed_upstream_first() -> None:
    found = parse_router_metadata({**FALLBACK, "generation_time": 2016})
    assert found is not None
    assert found.attempts == (RouterAttempt("OpenAI", 502), RouterAttempt("Azure", 200))
    assert found.selected == "Azure" and found.generation_time_ms == 2016.0
    assert as_column(found.attempts) == [
        {"upstream": "OpenAI", "status": 502, "latency_ms": None},
        {"upstream": "Azure", "status": 200, "latency_ms": None},
    ]


@pytest.mark.parametrize(
    "value",
    [
        None,
        "enabled",
        [],
        {"attempts": "many"},
        {"attempts": [1, "x", None, {"model": "m"}]},
        {"attempts": [{"provider": 7, "status": "200"}], "attempt": 1},
        {"attempts": [], "endpoints": {"available": "all"}},
        {"attempt": True, "endpoints": {"available": [{"provider": "A", "selected": True}] * 2}},
        {"attempts": [{"provider": "A", "status": 10**30}, {"provider": "B", "status": -1}]},
    ],
)
def test_unexpected_metadata_says_nothing_and_never_raises(value: Any) -> None:
    found = parse_router_metadata(value)
    assert (
        found is None
        or found.attempts is None
        or all(a.status is None or 0 <= a.status <= 599 for a in found.attempts)
    )
    assert attempts_in({"openrouter_metadata": value}) in (None, found and found.attempts)


def test_random_json_never_breaks_the_readers() -> None:
    rng = random.Random(36)
    leaves: list[Any] = [None, True, 0, -1, 200, 1.5, float("nan"), "", "OpenAI", "x" * 300]

    def value(depth: int) -> Any:
        roll = rng.random()
        if depth > 3 or roll < 0.4:
            return rng.choice(leaves)
        if roll < 0.7:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        keys = ["attempts", "attempt", "provider", "status", "endpoints", "available",
                "selected", "latency", "provider_name", "strategy", "generation_time"]  # fmt: skip
        return {rng.choice(keys): value(depth + 1) for _ in range(rng.randint(0, 5))}

    for _ in range(3000):
        doc = value(0)
        parse_router_metadata(doc)
        attempts_in({"openrouter_metadata": doc})
        found = provider_responses({"provider_responses": doc})
        for attempt in found or ():
            assert attempt.upstream is None or len(attempt.upstream) <= 128


def test_the_generation_records_provider_responses() -> None:
    example = _json(HERE / "generation_provider_response_openapi_example.json")
    assert provider_responses({"provider_responses": [example]}) == (
        RouterAttempt("OpenAI", 200, 1200.0),
    )
    real = _json(PAYLOADS / "billing" / "openrouter_generation_real.json")["data"]
    assert provider_responses(real) == (RouterAttempt("DeepInfra", 200, 420.0),)
    assert provider_responses({"provider_responses": None}) is None  # the OpenAPI example's
    assert provider_responses({}) is None


def test_a_body_with_metadata_gives_its_attempts_and_nothing_else_changes() -> None:
    raw = _json(PAYLOADS / "openrouter_chat_doc_example.json")
    plain = _provider().parse_response(json.dumps(raw).encode())
    with_meta = _provider().parse_response(
        json.dumps({**raw, "openrouter_metadata": FALLBACK}).encode()
    )
    assert with_meta.router_attempts == (RouterAttempt("OpenAI", 502), RouterAttempt("Azure", 200))
    assert plain.router_attempts is None
    assert _without_attempts(with_meta) == _without_attempts(plain)
    # A provider that names no upstream reads no router metadata either.
    openai = OpenAIProvider(api_key="k", base_url="http://127.0.0.1:1")
    body = json.dumps({**raw, "openrouter_metadata": FALLBACK}).encode()
    assert openai.parse_response(body).router_attempts is None


def _without_attempts(parsed: Parsed) -> tuple[Any, ...]:
    return (parsed.usage, parsed.model, parsed.upstream, parsed.generation_id,
            parsed.provider_cost_usd, parsed.error, parsed.valid)  # fmt: skip


def _with_metadata_on(text: str, index: int, metadata: Any) -> str:
    """The stream with ``openrouter_metadata`` added to its data chunk ``index``."""
    lines = text.split("\n")
    data = [i for i, line in enumerate(lines) if line.startswith("data: {")]
    at = data[index]
    chunk = json.loads(lines[at][len("data: ") :])
    # Compact, as OpenRouter writes its chunks (the fast path reads only that form).
    changed = {**chunk, "openrouter_metadata": metadata}
    lines[at] = "data: " + json.dumps(changed, separators=(",", ":"), ensure_ascii=False)
    return "\n".join(lines)


def _stream(parser: Any, text: str) -> Parsed:
    raw = text.encode()
    for i in range(0, len(raw), 97):  # chunk boundaries anywhere
        parser.feed(raw[i : i + 97])
    parsed: Parsed = parser.finish()
    return parsed


@pytest.mark.parametrize("index", [-1, 10], ids=["final chunk", "a plain text chunk"])
def test_a_stream_gives_the_attempts_of_the_chunk_that_carries_them(index: int) -> None:
    # The docs: on the final chunk before [DONE]. A plain text chunk carrying it (the
    # 11th, "language") checks the fast paths do not pass over it as text only.
    text = (PAYLOADS / "openrouter_stream_openai_o3.sse").read_text()
    changed = _with_metadata_on(text, index, FALLBACK)
    provider = _provider()
    for parser in (provider.stream_parser(), provider.usage_stream_parser()):
        parsed = _stream(parser, changed)
        assert parsed.router_attempts == (
            RouterAttempt("OpenAI", 502),
            RouterAttempt("Azure", 200),
        )
        reference = _stream(provider.stream_parser(), text)
        assert reference.router_attempts is None
        assert _without_attempts(parsed) == _without_attempts(reference)


def test_anthropic_messages_carry_it_on_message_stop() -> None:
    text = (PAYLOADS / "anthropic_stream_doc_example.sse").read_text()
    changed = text.replace(
        'data: {"type": "message_stop"}',
        "data: " + json.dumps({"type": "message_stop", "openrouter_metadata": DOC_SHAPE}),
    )
    assert changed != text
    parsed = _stream(MessageStreamParser(), changed)
    assert parsed.router_attempts == (RouterAttempt("OpenAI", 200),)
    assert parsed.usage == _stream(MessageStreamParser(), text).usage


def test_openrouter_asks_for_router_metadata_unless_told_not_to() -> None:
    request = ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}])
    sent = _provider().build_request(request).headers
    assert sent["x-openrouter-metadata"] == "enabled"
    off = OpenRouterProvider(api_key="k", base_url="http://x", router_metadata=False)
    assert "x-openrouter-metadata" not in off.build_request(request).headers
    other = make_provider("openai", api_key="k")
    assert "x-openrouter-metadata" not in other.build_request(request).headers


@pytest.mark.parametrize("inside", [False, True], ids=["on the event", "in its response"])
def test_a_responses_stream_gives_them_from_its_final_event(inside: bool) -> None:
    # The docs say "the final chunk" for the Responses API without saying where in the
    # event: both places are read.
    text = (PAYLOADS / "openrouter_responses_stream_gpt_oss_reasoning.sse").read_text()
    lines = text.split("\n")
    (at,) = [i for i, line in enumerate(lines) if '"type":"response.completed"' in line]
    event = json.loads(lines[at][len("data: ") :])
    if inside:
        event["response"]["openrouter_metadata"] = FALLBACK
    else:
        event["openrouter_metadata"] = FALLBACK
    lines[at] = "data: " + json.dumps(event, separators=(",", ":"))
    provider = _provider()
    parsed = _stream(provider.responses_stream_parser(), "\n".join(lines))
    reference = _stream(provider.responses_stream_parser(), text)
    assert parsed.router_attempts == (RouterAttempt("OpenAI", 502), RouterAttempt("Azure", 200))
    assert reference.router_attempts is None and parsed.usage == reference.usage
