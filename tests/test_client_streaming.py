"""Streaming through the sync and async clients, against a loopback server that sends
real SSE payloads chunk by chunk."""

from __future__ import annotations

import gzip
import time
from decimal import Decimal
from typing import Any

import httpx
import pytest

from ledger.client import AsyncClient, Client
from ledger.errors import ProviderTimeout, RateLimited, StreamInterrupted
from ledger.providers import make_provider
from tests.llm_loopback import LoopbackLLM, Reply, Rows
from tests.test_client import KEY, MESSAGES


def sync_client(server: LoopbackLLM, rows: Rows, name: str) -> Client:
    provider = make_provider(name, api_key=KEY, base_url=server.url)
    return Client(providers=[provider], ledger=rows, strict=True, default_provider=name)


def async_client(server: LoopbackLLM, rows: Rows, name: str) -> AsyncClient:
    provider = make_provider(name, api_key=KEY, base_url=server.url)
    return AsyncClient(providers=[provider], ledger=rows, strict=True, default_provider=name)


STREAMS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "openai": (
        "openai_stream_include_usage_real.sse",
        "gpt-4o-mini",
        {"input_tokens": 78, "output_tokens": 9},
    ),
    "openrouter": (
        "openrouter_stream_openai_o3.sse",
        "openai/o3",
        {"input_tokens": 9, "output_tokens": 104, "upstream": "OpenAI", "cost_source": "provider"},
    ),
    "anthropic": (
        "anthropic_stream_web_fetch_real.sse",
        "claude-sonnet-4",
        {"input_tokens": 7244, "output_tokens": 153},
    ),
    "groq": (
        "groq_stream_x_groq_usage_only_real.sse",
        "deepseek-r1-distill-llama-70b",
        {"input_tokens": 21, "output_tokens": 988},
    ),
    "deepseek": (
        "deepseek_stream_reasoner_real.sse",
        "deepseek-reasoner",
        {"input_tokens": 6, "output_tokens": 212, "reasoning_tokens": 198},
    ),
}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_streams_record_usage_from_whichever_chunk_carries_it(
    server: LoopbackLLM, rows: Rows, name: str
) -> None:
    payload, model, expected = STREAMS[name]
    server.queue(Reply.payload(payload, chunk_size=97))
    with sync_client(server, rows, name) as client, client.stream(MESSAGES, model=model) as stream:
        text = "".join(stream)
    assert stream.result is not None and stream.result.content == text and text
    event = rows.only
    assert event.streamed and event.status == "ok" and event.ttft_ms is not None
    assert event.latency_ms is not None and event.ttft_ms <= event.latency_ms
    for field, value in expected.items():
        assert getattr(event, field) == value, field
    if name != "openrouter":
        assert event.cost_source == "computed" or event.cost_usd is None


def compressed_twin(reply: Reply) -> Reply:
    """``reply`` gzip-compressed, as a proxy may send an event stream."""
    headers = {**reply.headers, "content-encoding": "gzip"}
    return Reply(body=gzip.compress(reply.body), headers=headers, chunk_size=reply.chunk_size)


def test_a_compressed_stream_reads_as_the_plain_one(server: LoopbackLLM, rows: Rows) -> None:
    payload, model, _ = STREAMS["openai"]
    plain = Reply.payload(payload, chunk_size=97)
    server.queue(plain, compressed_twin(plain))
    with sync_client(server, rows, "openai") as client:
        texts = []
        for _ in range(2):
            with client.stream(MESSAGES, model=model) as stream:
                texts.append(list(stream))
    assert texts[0] == texts[1] and len(texts[0]) > 1
    first, second = rows.events
    assert (first.input_tokens, first.output_tokens) == (second.input_tokens, second.output_tokens)
    assert second.status == "ok" and second.output_tokens == 9


async def test_async_compressed_stream_reads_as_the_plain_one(
    server: LoopbackLLM, rows: Rows
) -> None:
    payload, model, _ = STREAMS["anthropic"]
    plain = Reply.payload(payload, chunk_size=97)
    server.queue(plain, compressed_twin(plain))
    async with async_client(server, rows, "anthropic") as client:
        texts = []
        for _ in range(2):
            async with client.stream(MESSAGES, model=model) as stream:
                texts.append([piece async for piece in stream])
    assert texts[0] == texts[1] and texts[0]
    first, second = rows.events
    assert (first.input_tokens, first.output_tokens) == (second.input_tokens, second.output_tokens)
    assert second.status == "ok" and second.output_tokens == 153


def test_stream_requests_ask_for_usage(server: LoopbackLLM, rows: Rows) -> None:
    server.queue(Reply.payload("openai_stream_include_usage_real.sse"))
    with sync_client(server, rows, "openai") as client, client.stream(MESSAGES, model="m") as s:
        list(s)
    body = server.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_chunks_reach_the_caller_before_the_stream_ends(server: LoopbackLLM, rows: Rows) -> None:
    server.queue(Reply.payload("anthropic_stream_doc_example.sse", chunk_size=120, delay_s=0.05))
    with sync_client(server, rows, "anthropic") as client:
        start = time.perf_counter()
        with client.stream(MESSAGES, model="claude") as stream:
            first = next(stream)
            first_at = time.perf_counter() - start
            rest = list(stream)
        total = time.perf_counter() - start
    assert first and rest
    assert first_at < total - 0.1  # the first text arrived while chunks were still coming
    assert rows.only.output_tokens == 15


def test_in_band_error_ends_the_stream_with_a_typed_error_and_usage_so_far(
    server: LoopbackLLM, rows: Rows
) -> None:
    server.queue(Reply.payload("openrouter_stream_midstream_error_real.sse"))
    with sync_client(server, rows, "openrouter") as client:
        stream = client.stream(MESSAGES, model="minimax/minimax-m2:free", session_id="s")
        with pytest.raises(StreamInterrupted) as info, stream:
            list(stream)
    assert not info.value.transient  # "Token limit reached" (400) would fail anywhere
    event = rows.only
    assert event.status == "error" and event.error_type == "stream_interrupted"
    assert (event.input_tokens, event.output_tokens, event.reasoning_tokens) == (43, 10, 11)
    assert event.cost_usd == Decimal(0) and event.cost_source == "provider"
    assert event.upstream == "Minimax" and event.session_key == "ledger:s"


def test_anthropic_overloaded_event_is_transient(server: LoopbackLLM, rows: Rows) -> None:
    server.queue(Reply.payload("anthropic_stream_error_overloaded_sdk.sse"))
    with (
        sync_client(server, rows, "anthropic") as client,
        pytest.raises(StreamInterrupted) as info,
        client.stream(MESSAGES, model="c") as s,
    ):
        list(s)
    assert info.value.transient and not info.value.delivered
    assert rows.only.error_type == "stream_interrupted" and rows.only.input_tokens == 0


def test_a_read_timeout_mid_stream_is_interrupted_and_recorded(
    server: LoopbackLLM, rows: Rows
) -> None:
    server.queue(Reply.payload("openai_stream_include_usage_real.sse", chunk_size=700, delay_s=2))
    provider = make_provider("openai", api_key=KEY, base_url=server.url)
    with (
        Client(providers=[provider], ledger=rows, strict=True, timeout=0.3) as client,
        pytest.raises(StreamInterrupted) as info,
        client.stream(MESSAGES, model="gpt-4o-mini", provider="openai") as stream,
    ):
        next(stream)
        list(stream)
    assert info.value.transient and info.value.delivered and "timed out" in str(info.value)
    broken = info.value.__cause__
    assert isinstance(broken, ProviderTimeout) and isinstance(broken.__cause__, httpx.ReadTimeout)
    event = rows.only
    assert (event.status, event.error_type, event.usage_reported) == (
        "error",
        "stream_interrupted",
        False,
    )
    assert event.model == "gpt-4o-mini-2024-07-18" and event.ttft_ms is not None


def test_caller_that_stops_early_still_gets_its_row(server: LoopbackLLM, rows: Rows) -> None:
    server.queue(Reply.payload("groq_stream_x_groq_usage_only_real.sse", chunk_size=512))
    with sync_client(server, rows, "groq") as client, client.stream(MESSAGES, model="m") as stream:
        first = next(stream)
    assert first
    event = rows.only
    assert event.streamed and event.ttft_ms is not None
    assert event.model == "deepseek-r1-distill-llama-70b"
    # Left before the end: not served, and the usage seen so far is not the call's.
    assert (event.status, event.error_type, event.usage_reported) == ("error", "abandoned", False)


def test_connection_dropped_mid_stream_is_interrupted_and_recorded(
    server: LoopbackLLM, rows: Rows
) -> None:
    server.queue(Reply.payload("openrouter_stream_openai_o3.sse", chunk_size=2000, drop_after=5))
    with (
        sync_client(server, rows, "openrouter") as client,
        pytest.raises(StreamInterrupted) as info,
        client.stream(MESSAGES, model="o3") as s,
    ):
        list(s)
    assert info.value.transient
    assert rows.only.error_type == "stream_interrupted" and rows.only.upstream == "OpenAI"


def test_stream_http_error_is_raised_when_opening(server: LoopbackLLM, rows: Rows) -> None:
    server.queue(
        Reply.payload(
            "openrouter_error_429_free_limit_real.json", status=429, headers={"retry-after": "7"}
        )
    )
    with sync_client(server, rows, "openrouter") as client, pytest.raises(RateLimited) as info:
        client.stream(MESSAGES, model="m").__enter__()
    assert info.value.retry_after == 7
    assert rows.only.streamed and rows.only.error_type == "rate_limited"


async def test_async_chat_and_stream(server: LoopbackLLM, rows: Rows) -> None:
    server.queue(
        Reply.payload("openrouter_chat_openai_reasoning.json"),
        Reply.payload("openrouter_stream_bedrock_empty_choices_usage.sse", chunk_size=50),
    )
    async with async_client(server, rows, "openrouter") as client:
        result = await client.chat(
            MESSAGES, model="openai/gpt-5-mini", session_id="s", actor_id="a"
        )
        async with client.stream(MESSAGES, model="anthropic/claude-sonnet-4.6") as stream:
            text = "".join([piece async for piece in stream])
    assert result.upstream == "OpenAI" and result.usage is not None
    assert result.usage.reasoning_tokens == 960
    assert text == "Hello!"
    first, second = rows.events
    assert first.session_key == "ledger:s:a" and first.cost_usd == Decimal("0.00435825")
    assert second.upstream == "Amazon Bedrock" and second.input_tokens == 254 and second.streamed


async def test_async_stream_in_band_error(server: LoopbackLLM, rows: Rows) -> None:
    server.queue(Reply.payload("openrouter_stream_midstream_error_doc.sse"))
    async with async_client(server, rows, "openrouter") as client:
        with pytest.raises(StreamInterrupted) as info:
            async with client.stream(MESSAGES, model="openai/gpt-4o") as stream:
                async for _ in stream:
                    pass
    assert info.value.transient
    assert rows.only.upstream == "OpenAI" and rows.only.generation_id == "gen-abc123"


async def test_async_caller_stopping_early_gets_a_row(server: LoopbackLLM, rows: Rows) -> None:
    server.queue(Reply.payload("deepseek_stream_reasoner_real.sse", chunk_size=300))
    async with (
        async_client(server, rows, "deepseek") as client,
        client.stream(MESSAGES, model="deepseek-reasoner") as stream,
    ):
        async for _ in stream:
            break
    assert rows.only.model == "deepseek-reasoner"
    assert (rows.only.status, rows.only.error_type) == ("error", "abandoned")
    assert rows.only.usage_reported is False
