"""A caller that stops reading a stream without ``with``/``close()`` still gets its row,
and the connection goes back to the pool (review finding C)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from ledger.attempt import Attempt, Call, prepare
from ledger.cascade import Cascade, Route
from ledger.client import AsyncClient, Client
from ledger.client_stream import _StreamCore
from ledger.events import new_id
from ledger.providers import make_provider
from tests.llm_loopback import PAYLOADS, LoopbackLLM, Reply, Rows
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
    assert event.streamed and event.ttft_ms is not None
    assert (event.status, event.error_type, event.usage_reported) == ("error", "abandoned", False)
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
    assert event.streamed
    assert (event.status, event.error_type, event.usage_reported) == ("error", "abandoned", False)
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
    assert event.streamed and event.actor_id == "planner"
    assert (event.status, event.error_type) == ("error", "abandoned")
    assert client.chat(MESSAGES, model="gpt-4o-mini").content
    client.http.close()


# -- when a stream counts as abandoned, and what its usage is worth -------------------------

OPENAI_SSE = (PAYLOADS / SSE).read_bytes()


def _core(rows: Rows, name: str = "openai") -> _StreamCore:
    """The I/O-free half of a stream, fed bytes directly: what arrived is then exact."""
    client = Client(providers=[make_provider(name, api_key=KEY)], ledger=rows, strict=True)
    provider = client.provider(name)
    target = Attempt(provider, "m", new_id(), 1, name, "m")
    core = _StreamCore(client, prepare(Call(messages=MESSAGES), target, stream=True))
    core.status = 200
    return core


def test_a_caller_stopping_after_the_streams_end_arrived_leaves_an_ok_row(rows: Rows) -> None:
    # The whole stream came in one read ([DONE] included); the caller took one delta and
    # left: nothing was left unread, so the call is complete and its usage reported.
    core = _core(rows)
    core.feed(OPENAI_SSE)
    assert core.next_delta()
    core.finish(early=True)
    event = rows.only
    assert (event.status, event.error_type, event.usage_reported) == ("ok", None, True)
    assert event.input_tokens == 78 and event.output_tokens == 9


def test_a_caller_stopping_before_the_end_leaves_an_abandoned_row_with_partial_usage(
    rows: Rows,
) -> None:
    anthropic = (PAYLOADS / "anthropic_stream_sdk_fixture.sse").read_bytes()
    core = _core(rows, "anthropic")
    core.feed(anthropic[: anthropic.index(b"event: content_block_stop")])
    assert core.next_delta() == "Hello"
    core.finish(early=True)
    event = rows.only
    assert (event.status, event.error_type, event.usage_reported) == ("error", "abandoned", False)
    assert event.input_tokens == 11  # what was seen is kept, flagged as not the call's usage


def test_a_stream_without_usage_is_ok_but_says_its_usage_was_not_reported(
    server: LoopbackLLM, rows: Rows
) -> None:
    # A server that ignores stream_options (or a stream cut before its usage chunk, then
    # closed cleanly): 0 tokens that are not a count.
    no_usage = b"\n\n".join(
        block for block in OPENAI_SSE.split(b"\n\n") if b'"usage":{' not in block
    )
    server.queue(Reply(no_usage, chunk_size=64, headers={"content-type": "text/event-stream"}))
    client = one_connection_client(server, rows)
    with client.stream(MESSAGES, model="gpt-4o-mini") as stream:
        assert "".join(stream)
    event = rows.only
    assert (event.status, event.input_tokens, event.usage_reported) == ("ok", 0, False)
    assert event.cost_usd is None
    client.http.close()


def test_an_anthropic_stream_ending_before_message_delta_has_partial_usage(
    server: LoopbackLLM, rows: Rows
) -> None:
    anthropic = (PAYLOADS / "anthropic_stream_sdk_fixture.sse").read_bytes()
    cut = anthropic[: anthropic.index(b"event: message_delta")]
    server.queue(Reply(cut, chunk_size=64, headers={"content-type": "text/event-stream"}))
    provider = make_provider("anthropic", api_key=KEY, base_url=server.url)
    with Client(providers=[provider], ledger=rows, strict=True) as client:
        with client.stream(MESSAGES, provider="anthropic", model="claude-3-opus") as stream:
            assert "".join(stream) == "Hello there!"
        assert stream.result is not None
        assert "stream ended before message_delta: usage is partial" in stream.result.problems
    event = rows.only
    assert event.status == "ok" and event.input_tokens == 11
    assert event.usage_reported is False  # output_tokens 1 is message_start's placeholder
