"""An upstream that breaks off a stream the client is already reading (FIN, RST, a hang
past the read timeout): the client's own SDK raises, as it would had it called the
provider itself, on every pair of wires; the row says ``stream_interrupted``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from tests.gateway.conftest import KEY, Served, config_table
from tests.llm_loopback import PAYLOADS, LoopbackLLM, Reply, Rows

MESSAGES: Any = [{"role": "user", "content": "What is the capital of the UK?"}]
OPENAI_SSE = "openai_stream_include_usage_real.sse"
ANTHROPIC_SSE = "anthropic_stream_real_padded.sse"
CHUNK = 64


def cut_after_first_text(name: str, marker: bytes) -> Reply:
    """The payload ``name`` in 64-byte chunks, broken off once the event holding the first
    text (``marker``) has gone out, long before the stream's end."""
    body = (PAYLOADS / name).read_bytes()
    end = body.index(b"\n\n", body.index(marker)) + 2
    chunks = -(-end // CHUNK)
    assert chunks * CHUNK < len(body) - 200  # the end (stop, usage) is never sent
    return Reply.payload(name, chunk_size=CHUNK, drop_after=chunks)


def openai_cut(**changes: Any) -> Reply:
    reply = cut_after_first_text(OPENAI_SSE, b'"content":"The"')
    for key, value in changes.items():
        setattr(reply, key, value)
    return reply


def anthropic_cut() -> Reply:
    return cut_after_first_text(ANTHROPIC_SSE, b'"text_delta"')


@pytest.fixture
def via_loopback(loopback: LoopbackLLM, serve_gateway: Callable[..., Served]) -> Served:
    url = loopback.url
    return serve_gateway(config_table(url + "/v1", url, url + "/api/v1", timeout_s=1))


def read_openai(served: Served, model: str) -> list[str]:
    """The text an OpenAI SDK caller read before the SDK raised (it must raise)."""
    texts: list[str] = []
    client = openai.OpenAI(api_key=KEY, base_url=served.url + "/v1", max_retries=0)
    with client, pytest.raises(openai.APIConnectionError):
        for chunk in client.chat.completions.create(model=model, messages=MESSAGES, stream=True):
            texts += [c.delta.content or "" for c in chunk.choices]
    return texts


def read_anthropic(served: Served, model: str) -> tuple[list[str], anthropic.APIError]:
    """The text an Anthropic SDK caller read, and what the SDK raised (it must raise)."""
    texts: list[str] = []
    client = anthropic.Anthropic(api_key=KEY, base_url=served.url, max_retries=0)
    with (
        client,
        pytest.raises(anthropic.APIError) as raised,
        client.messages.stream(model=model, max_tokens=50, messages=MESSAGES) as stream,
    ):
        texts += stream.text_stream
    return texts, raised.value


def interrupted(rows: Rows, provider: str) -> None:
    (row,) = rows.wait(1)
    assert (row.provider, row.status, row.error_type) == (provider, "error", "stream_interrupted")
    assert row.streamed and not row.usage_reported


@pytest.mark.parametrize(
    "reply",
    [openai_cut(), openai_cut(reset=True)],
    ids=["upstream-closes", "upstream-resets"],
)
@pytest.mark.parametrize("model", ["openai/gpt-4o-mini", "gpt-4o-mini"])
def test_the_openai_sdk_raises_when_the_upstream_breaks_off_its_stream(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows, reply: Reply, model: str
) -> None:
    # openai/…: the only route, relayed from its first byte; gpt-4o-mini: a chain with a
    # fallback, relayed from its first text (the break comes after it: no fallback).
    loopback.queue(reply)
    assert read_openai(via_loopback, model)[:2] == ["", "The"]
    interrupted(rows, "openai")


def test_the_openai_sdk_raises_when_the_upstream_hangs_past_the_read_timeout(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    # The first 1 KB (its first text included) at once, then 3 s of silence: the
    # gateway's read timeout (timeout_s = 1) gives up on it.
    loopback.queue(Reply.payload(OPENAI_SSE, chunk_size=1024, delay_s=3))
    assert "The" in read_openai(via_loopback, "openai/gpt-4o-mini")
    interrupted(rows, "openai")


def test_the_openai_sdk_raises_when_its_anthropic_route_breaks_off(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    # Translated on the way (Anthropic events -> chat chunks): no finish chunk, no [DONE].
    loopback.queue(anthropic_cut())
    assert "2" in read_openai(via_loopback, "claude-haiku")
    interrupted(rows, "anthropic")


def test_the_anthropic_sdk_raises_when_the_upstream_breaks_off_its_stream(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    loopback.queue(anthropic_cut())
    texts, error = read_anthropic(via_loopback, "claude-haiku")
    assert texts == ["2"]
    assert isinstance(error, anthropic.APIStatusError)  # the wire's error event
    assert "broke off mid-stream" in str(error)
    interrupted(rows, "anthropic")


def test_the_anthropic_sdk_raises_when_its_openai_route_breaks_off(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    # Translated on the way (chat chunks -> Anthropic events): no message_stop.
    loopback.queue(openai_cut())
    texts, error = read_anthropic(via_loopback, "gpt-4o-mini")
    assert texts == ["The"]
    assert "broke off mid-stream" in str(error)
    interrupted(rows, "openai")
