"""Every real payload in tests/fixtures/payloads yields exactly the values SOURCES.md lists.

The expectations are read from the ``Expected:`` line of each entry, so a new
payload with expected values is tested the moment it is added; a test also
checks that no payload file lacks an entry.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from ledger.providers import PROVIDERS, Provider
from ledger.providers.base import Parsed, StreamParser
from ledger.providers.openai_compat import OpenAIStyleProvider

PAYLOADS = Path(__file__).resolve().parent.parent / "fixtures" / "payloads"
COUNTERS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
PREFIX_TO_PROVIDER = {
    "openrouter": "openrouter",
    "openai": "openai",
    "anthropic": "anthropic",
    "deepseek": "deepseek",
    "gemini": "gemini",
    "mistral": "mistral",
    "groq": "groq",
}


def _value(raw: str) -> Any:
    if raw == "null":
        return None
    if raw.startswith('"'):
        return raw.strip('"')
    if re.fullmatch(r"-?\d+", raw):
        return int(raw)
    return Decimal(raw)


def expected_values() -> dict[str, dict[str, Any]]:
    text = (PAYLOADS / "SOURCES.md").read_text()
    entries: dict[str, dict[str, Any]] = {}
    for match in re.finditer(r"^#### `([^`]+)`\n(.*?)^- Expected: ([^\n]*)$", text, re.M | re.S):
        name, fields = match.group(1), match.group(3)
        pairs = re.findall(r'(\w+)=("[^"]*"|[^,\s]+)', fields)
        entries[name] = {key: _value(value) for key, value in pairs}
    return entries


EXPECTED = expected_values()


def provider_for(name: str) -> Provider:
    cls = PROVIDERS[PREFIX_TO_PROVIDER[name.split("_", 1)[0]]]
    return cls(api_key="test-key", base_url="http://127.0.0.1:9")


def is_responses_api(name: str) -> bool:
    """Responses API payloads (``POST …/responses``) are parsed by the endpoint's own parsers."""
    return "_responses_" in name


def parse(name: str, chunk_size: int | None = None) -> Parsed:
    body = (PAYLOADS / name).read_bytes()
    provider = provider_for(name)
    responses = is_responses_api(name)
    if not name.endswith(".sse"):
        if responses:
            assert isinstance(provider, OpenAIStyleProvider)
            return provider.parse_responses(body)
        return provider.parse_response(body)
    parser: StreamParser
    if responses:
        assert isinstance(provider, OpenAIStyleProvider)
        parser = provider.responses_stream_parser()
    else:
        parser = provider.stream_parser()
    step = chunk_size or len(body) or 1
    for i in range(0, len(body), step):
        parser.feed(body[i : i + step])
    return parser.finish()


def assert_matches(parsed: Parsed, expected: dict[str, Any]) -> None:
    if expected["input_tokens"] is None:
        assert parsed.usage is None
    else:
        assert parsed.usage is not None
        got = {name: getattr(parsed.usage, name) for name in COUNTERS}
        assert got == {name: expected[name] for name in COUNTERS}
    assert parsed.upstream == expected["upstream"]
    assert parsed.model == expected["model"]
    assert parsed.generation_id == expected["generation_id"]
    assert parsed.provider_cost_usd == expected["provider_cost_usd"]


def test_every_payload_file_has_expected_values() -> None:
    files = {p.name for p in PAYLOADS.iterdir() if p.suffix in {".json", ".sse"}}
    assert files == set(EXPECTED)
    assert len(EXPECTED) >= 47


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_payload_yields_the_documented_usage_and_identity(name: str) -> None:
    assert_matches(parse(name), EXPECTED[name])


@pytest.mark.parametrize("name", sorted(n for n in EXPECTED if n.endswith(".sse")))
def test_stream_gives_the_same_answer_however_the_bytes_are_split(name: str) -> None:
    assert_matches(parse(name, chunk_size=7), EXPECTED[name])
    if (PAYLOADS / name).stat().st_size < 40_000:
        assert_matches(parse(name, chunk_size=1), EXPECTED[name])


@pytest.mark.parametrize(
    "name",
    [
        "openrouter_stream_midstream_error_real.sse",
        "openrouter_stream_midstream_error_doc.sse",
        "openrouter_stream_midstream_error_doc_streaming_page.sse",
        "groq_stream_midstream_error_real.sse",
        "anthropic_stream_error_overloaded_sdk.sse",
        "openrouter_chat_choice_error_doc_fragment.json",
    ],
)
def test_in_band_errors_are_surfaced_not_reported_as_success(name: str) -> None:
    assert parse(name).error is not None


def test_in_band_error_transience_follows_its_code() -> None:
    overloaded = parse("anthropic_stream_error_overloaded_sdk.sse").error
    assert overloaded is not None and overloaded.transient and overloaded.http_status == 529
    rate = parse("openrouter_stream_midstream_error_doc.sse").error
    assert rate is not None and rate.transient and rate.http_status == 429
    token_limit = parse("openrouter_stream_midstream_error_real.sse").error
    assert token_limit is not None and not token_limit.transient
    groq = parse("groq_stream_midstream_error_real.sse").error
    assert groq is not None and groq.http_status == 400 and not groq.transient


def test_streams_deliver_the_text_to_the_caller() -> None:
    provider = provider_for("anthropic_stream_sdk_fixture.sse")
    parser = provider.stream_parser()
    pieces = parser.feed((PAYLOADS / "anthropic_stream_sdk_fixture.sse").read_bytes())
    assert "".join(pieces) == "Hello there!"
    assert parser.finish().content == "Hello there!"


@pytest.mark.parametrize(
    ("name", "message", "code", "retry_after"),
    [
        ("openrouter_error_429_capacity_doc.json", "All providers for", "rate_limit_exceeded", 40),
        ("openrouter_error_429_free_limit_real.json", "Rate limit exceeded", "429", None),
        ("anthropic_error_529_overloaded_real.json", "Overloaded", "overloaded_error", None),
        ("anthropic_error_429_rate_limit_sdk.json", "This request would", "rate_limit_error", None),
        (
            "groq_error_400_tool_use_failed_real.json",
            "Tool call validation",
            "tool_use_failed",
            None,
        ),
        ("openrouter_error_502_doc.json", "Provider returned error", "502", None),
    ],
)
def test_error_bodies_give_message_code_and_retry_hint(
    name: str, message: str, code: str, retry_after: float | None
) -> None:
    provider = provider_for(name)
    body = provider.parse_error(429, (PAYLOADS / name).read_bytes())
    assert body.message.startswith(message)
    assert body.code == code
    assert body.retry_after == retry_after
