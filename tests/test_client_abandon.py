"""A caller that stops reading a stream without ``with``/``close()`` still gets its row,
and the connection goes back to the pool (review finding C)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from ledger.cascade import Cascade, Route
from ledger.client import AsyncClient, Client
from ledger.providers import make_provider
from tests.llm_loopback import LoopbackLLM, Reply, Rows
from tests.test_client import KEY, MESSAGES

SSE = "openai_stream_include_usage_real.sse"
#: One connection, and a short wait for it: a connection never released fails the next call.
LIMITS = httpx.Limits(max_connections=1)
TIMEOUT = httpx.Timeout(5.0, pool=1.0)


def slow_stream() -> Reply:
    # Still sending when the caller walks away.
    return Reply.payload(SSE, chunk_size=64, delay_s=0.02)


def one_connection_client(server: LoopbackLLM, rows: Rows) -> Client:
    http = httpx.Client(limits=LIMITS, timeout=TIMEOUT)
    provider = make_provider("openai", api_key=KEY, base_url=server.url)
    return Client(providers=[provider], ledger=rows, strict=True, http_client=http)


def test_breaking_out_of_a_stream_without_with_records_the_row_and_frees_the_connection(
    server: LoopbackLLM, rows: Rows
) -> None:
    server.queue(slow_stream(), Reply.payload("openai_chat_cached_real.json"))
    client = one_connection_client(server, rows)
    for text in client.stream(MESSAGES, model="gpt-4o-mini", session_id="s-1"):
        assert text
        break
    event = rows.only  # recorded when the loop let go of the stream, no GC pass needed
    assert event.status == "ok" and event.streamed and event.ttft_ms is not None
    assert event.session_id == "s-1"
    # The only connection went back to the pool: the next call does not wait for it.
    assert client.chat(MESSAGES, model="gpt-4o-mini").content
    assert len(rows.events) == 2
    client.http.close()


def test_a_stream_dropped_before_it_was_read_sends_and_records_nothing(
    server: LoopbackLLM, rows: Rows
) -> None:
    client = one_connection_client(server, rows)
    stream = client.stream(MESSAGES, model="gpt-4o-mini")
    del stream
    assert server.requests == [] and rows.events == []
    client.http.close()


async def test_breaking_out_of_an_async_stream_records_the_row_and_frees_the_connection(
    server: LoopbackLLM, rows: Rows
) -> None:
    server.queue(slow_stream(), Reply.payload("openai_chat_cached_real.json"))
    http = httpx.AsyncClient(limits=LIMITS, timeout=TIMEOUT)
    provider = make_provider("openai", api_key=KEY, base_url=server.url)
    client = AsyncClient(providers=[provider], ledger=rows, strict=True, http_client=http)
    async for text in client.stream(MESSAGES, model="gpt-4o-mini"):
        assert text
        break
    event = rows.only
    assert event.status == "ok" and event.streamed
    await asyncio.sleep(0)  # the scheduled aclose() runs
    result = await client.chat(MESSAGES, model="gpt-4o-mini")
    assert result.content and len(rows.events) == 2
    await http.aclose()


def test_breaking_out_of_a_cascade_stream_records_the_answering_attempt(
    server: LoopbackLLM, rows: Rows
) -> None:
    server.queue(slow_stream(), Reply.payload("openai_chat_cached_real.json"))
    client = one_connection_client(server, rows)
    cascade = Cascade(client, [Route("openai", "gpt-4o-mini")])
    received: list[Any] = []
    for text in cascade.stream(MESSAGES, actor_id="planner"):
        received.append(text)
        break
    assert received
    event = rows.only
    assert event.status == "ok" and event.streamed and event.actor_id == "planner"
    assert client.chat(MESSAGES, model="gpt-4o-mini").content
    client.http.close()
