"""The metering transport's usage-only stream parser agrees with the full one.

It skips decoding chunks that cannot change the row once the first text and
the response's identity are known; every figure the ledger records must come
out exactly as the full parser's, however the stream is cut.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.providers.base import Parsed
from ledger.providers.openai_compat import OpenAIStyleProvider
from tests.providers.test_provider_payloads import PAYLOADS, provider_for

CHAT_STREAMS = sorted(
    p.name
    for p in PAYLOADS.glob("*.sse")
    if p.name.split("_", 1)[0] in ("openai", "openrouter", "groq", "deepseek", "mistral")
    and "_responses_" not in p.name
)


def run(parser: object, body: bytes, size: int) -> tuple[Parsed, bool]:
    saw_text = False
    for i in range(0, len(body), size):
        saw_text |= bool(parser.feed(body[i : i + size]))  # type: ignore[attr-defined]
    return parser.finish(), saw_text  # type: ignore[attr-defined]


def recorded(parsed: Parsed) -> Parsed:
    """Everything a ledger row is made of: all but the generated text."""
    return dataclasses.replace(parsed, content=None)


@pytest.mark.parametrize("name", CHAT_STREAMS)
@pytest.mark.parametrize("size", [1, 7, 64, 512, 1 << 20])
def test_usage_only_parser_records_what_the_full_parser_records(name: str, size: int) -> None:
    provider = provider_for(name)
    assert isinstance(provider, OpenAIStyleProvider)
    body = (PAYLOADS / name).read_bytes()
    full, full_text = run(provider.stream_parser(), body, size)
    lean, lean_text = run(provider.usage_stream_parser(), body, size)
    assert recorded(lean) == recorded(full)
    assert lean_text == full_text, "the first text (time to first token) is still seen"


def test_chat_streams_cover_every_openai_style_fixture() -> None:
    assert len(CHAT_STREAMS) >= 10


@given(st.binary(max_size=2048), st.integers(min_value=1, max_value=64))
def test_usage_only_parser_never_raises(body: bytes, size: int) -> None:
    provider = provider_for("openrouter_x")
    assert isinstance(provider, OpenAIStyleProvider)
    run(provider.usage_stream_parser(), body, size)
