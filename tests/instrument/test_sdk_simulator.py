"""The real openai and anthropic SDKs, metered, against the simulator's real HTTP server:
every attempt is one row whose values are what the SDK itself was told."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from decimal import Decimal

import anthropic
import openai
import pytest

import ledger
from ledger.instrument import meter as meter_module
from ledger.simulator import Fault, FaultKind, Simulator
from tests.instrument.conftest import Rows
from tests.llm_loopback import PAYLOADS, LoopbackLLM, Reply

Server = tuple[Simulator, str]
SYSTEM = "You are a careful code-review agent with a long tool contract. " * 80
HAIKU = "claude-haiku-4-5-20251001"


def _messages(task: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]


@pytest.fixture
def oai(sim_server: Server, rows: Rows) -> Iterator[openai.OpenAI]:
    base = sim_server[1] + "/v1"
    http = ledger.httpx_client(ledger=rows, providers={base: "openai"})
    with openai.OpenAI(api_key="sk-test", base_url=base, http_client=http, max_retries=0) as c:
        yield c


@pytest.fixture
def openrouter(sim_server: Server, rows: Rows) -> Iterator[openai.OpenAI]:
    # No mapping: OpenRouter is recognised by its /api/v1 path layout.
    http = ledger.httpx_client(ledger=rows)
    base = sim_server[1] + "/api/v1"
    with openai.OpenAI(api_key="sk-or", base_url=base, http_client=http, max_retries=0) as c:
        yield c


@pytest.fixture
def claude(sim_server: Server, rows: Rows) -> Iterator[anthropic.Anthropic]:
    client = anthropic.Anthropic(api_key="sk-ant-test", base_url=sim_server[1], max_retries=0)
    with ledger.instrument(client, ledger=rows) as c:
        yield c


def test_openai_plain_call_row_matches_what_the_sdk_saw(oai: openai.OpenAI, rows: Rows) -> None:
    with ledger.context(session_id="s-1", actor_id="reviewer", tags={"app": "ci"}):
        oai.chat.completions.create(model="gpt-4o-mini", messages=_messages("a"))  # type: ignore[arg-type]
        second = oai.chat.completions.create(model="gpt-4o-mini", messages=_messages("a"))  # type: ignore[arg-type]
    assert second.usage is not None and second.usage.prompt_tokens_details is not None
    row = rows.events[1]
    assert (row.provider, row.requested_provider, row.requested_model) == (
        "openai",
        "openai",
        "gpt-4o-mini",
    )
    assert row.model == second.model and row.generation_id == second.id
    assert row.input_tokens == second.usage.prompt_tokens
    assert row.output_tokens == second.usage.completion_tokens
    assert row.cache_read_tokens == second.usage.prompt_tokens_details.cached_tokens > 0
    assert (row.status, row.http_status, row.streamed, row.attempt) == ("ok", 200, False, 1)
    assert (row.session_id, row.actor_id, row.tags) == ("s-1", "reviewer", {"app": "ci"})
    assert row.cost_source == "computed" and row.cost_usd is not None and row.cost_usd > 0
    assert row.latency_ms is not None and row.ttft_ms is None
    assert rows.events[0].call_id != row.call_id


def test_openai_stream_row_written_when_the_stream_ends(oai: openai.OpenAI, rows: Rows) -> None:
    stream = oai.chat.completions.create(
        model="gpt-4o-mini",
        messages=_messages("stream"),  # type: ignore[arg-type]
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    usage = chunks[-1].usage
    assert usage is not None
    row = rows.only
    assert row.streamed and row.status == "ok" and row.ttft_ms is not None
    assert (row.input_tokens, row.output_tokens) == (usage.prompt_tokens, usage.completion_tokens)
    assert row.ttft_ms <= row.latency_ms  # type: ignore[operator]


def test_openrouter_row_has_upstream_reported_cost_and_sent_key(
    openrouter: openai.OpenAI, rows: Rows
) -> None:
    reply = openrouter.chat.completions.create(
        model="qwen/qwen3-coder",
        messages=_messages("route"),  # type: ignore[arg-type]
        extra_body={"session_id": "app:s-9:coder", "provider": {"sort": "price"}},
    )
    extra = reply.model_extra or {}
    usage_extra = reply.usage.model_extra if reply.usage is not None else None
    assert usage_extra is not None
    row = rows.only
    assert row.provider == "openrouter" and row.upstream == extra["provider"]
    assert row.cost_source == "provider"
    assert row.cost_usd == Decimal(str(usage_extra["cost"]))
    assert row.session_key == "app:s-9:coder" and row.routing_sort == "price"


def test_anthropic_plain_and_streamed_rows_normalise_cache_tokens(
    claude: anthropic.Anthropic, rows: Rows
) -> None:
    system = [{"type": "text", "text": SYSTEM * 5, "cache_control": {"type": "ephemeral"}}]
    user = [{"role": "user", "content": "review"}]
    claude.messages.create(model=HAIKU, max_tokens=50, system=system, messages=user)  # type: ignore[arg-type]
    second = claude.messages.create(model=HAIKU, max_tokens=50, system=system, messages=user)  # type: ignore[arg-type]
    with claude.messages.stream(model=HAIKU, max_tokens=40, messages=user) as stream:  # type: ignore[arg-type]
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text
    plain, streamed = rows.events[1], rows.events[2]
    u = second.usage
    total = u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)
    assert plain.provider == "anthropic" and plain.input_tokens == total
    assert plain.cache_read_tokens == u.cache_read_input_tokens > 0
    assert streamed.streamed and streamed.output_tokens == final.usage.output_tokens
    assert streamed.generation_id == final.id and streamed.ttft_ms is not None


def test_sdk_retries_on_429_and_5xx_are_attempts_of_one_call(
    sim_server: Server, rows: Rows
) -> None:
    sim, url = sim_server
    sim.faults.add(Fault(FaultKind.RATE_LIMIT, "openai", count=1))
    sim.faults.add(Fault(FaultKind.SERVER_ERROR, "openai", count=1, status=503))
    http = ledger.httpx_client(ledger=rows, providers={url + "/v1": "openai"})
    with openai.OpenAI(api_key="sk", base_url=url + "/v1", http_client=http, max_retries=2) as c:
        c.chat.completions.create(model="gpt-4o-mini", messages=_messages("retry"))  # type: ignore[arg-type]
    assert [(r.attempt, r.status, r.error_type, r.http_status) for r in rows.events] == [
        (1, "error", "rate_limited", 429),
        (2, "error", "server_error", 503),
        (3, "ok", None, 200),
    ]
    assert len({r.call_id for r in rows.events}) == 1
    assert rows.events[0].cost_usd is None  # unknown, never 0


def test_midstream_error_still_gets_a_stream_interrupted_row(
    sim_server: Server, oai: openai.OpenAI, rows: Rows
) -> None:
    sim_server[0].faults.add(Fault(FaultKind.MIDSTREAM_ERROR, "openai", after_chunks=1))
    stream = oai.chat.completions.create(
        model="gpt-4o-mini",
        messages=_messages("x"),
        stream=True,  # type: ignore[arg-type]
    )
    with pytest.raises(openai.APIError):
        for _ in stream:
            pass
    row = rows.only
    assert (row.status, row.error_type, row.streamed) == ("error", "stream_interrupted", True)


def test_dropped_connection_is_a_transport_row(
    sim_server: Server, oai: openai.OpenAI, rows: Rows
) -> None:
    sim_server[0].faults.add(Fault(FaultKind.CONNECTION_RESET, "openai", count=1))
    with pytest.raises(openai.APIConnectionError):
        oai.chat.completions.create(model="gpt-4o-mini", messages=_messages("x"))  # type: ignore[arg-type]
    row = rows.only
    assert (row.status, row.error_type, row.http_status) == ("error", "transport", None)


async def test_async_sdk_clients_are_metered_per_task(sim_server: Server, rows: Rows) -> None:
    base = sim_server[1] + "/v1"
    http = ledger.async_httpx_client(ledger=rows, providers={base: "openai"})
    async with openai.AsyncOpenAI(api_key="sk", base_url=base, http_client=http) as client:

        async def agent(name: str) -> None:
            with ledger.context(session_id=f"s-{name}", actor_id=name):
                for _ in range(3):
                    await asyncio.sleep(0)
                    stream = await client.chat.completions.create(
                        model="gpt-4o-mini",
                        messages=_messages(name),  # type: ignore[arg-type]
                        stream=True,
                        stream_options={"include_usage": True},
                    )
                    async for _ in stream:
                        await asyncio.sleep(0)

        await asyncio.gather(*(agent(n) for n in ("planner", "coder", "tester")))
    assert len(rows.events) == 9
    assert {(r.session_id, r.actor_id) for r in rows.events} == {
        ("s-planner", "planner"),
        ("s-coder", "coder"),
        ("s-tester", "tester"),
    }
    assert all(r.streamed and r.output_tokens > 0 for r in rows.events)


# -- streamed usage: OpenAI reports it only when asked -----------------------------------


@pytest.fixture
def warn_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """The missing-usage warning is once per process: let this test see its first time."""
    monkeypatch.setattr(meter_module, "_warned_no_usage", False)


def _stream_text(client: openai.OpenAI, **options: object) -> tuple[str, list[object]]:
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=_messages("stream"),  # type: ignore[arg-type]
        stream=True,
        **options,  # type: ignore[call-overload]
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks


def test_an_openai_stream_without_include_usage_is_marked_and_warned_about_once(
    oai: openai.OpenAI, rows: Rows, warn_afresh: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ledger.instrument"):
        for _ in range(2):
            text, chunks = _stream_text(oai)
            assert text and all(c.usage is None for c in chunks)  # type: ignore[attr-defined]
    assert [(r.status, r.input_tokens, r.usage_reported) for r in rows.events] == [
        ("ok", 0, False),
        ("ok", 0, False),
    ]
    warnings = [r.getMessage() for r in caplog.records if "include_usage" in r.getMessage()]
    assert len(warnings) == 1
    assert "include_usage=True" in warnings[0] and "usage_reported=false" in warnings[0]


def test_include_usage_asks_for_the_usage_and_the_sdk_gets_a_last_chunk_without_choices(
    sim_server: Server, rows: Rows, warn_afresh: None, caplog: pytest.LogCaptureFixture
) -> None:
    base = sim_server[1] + "/v1"
    http = ledger.httpx_client(ledger=rows, providers={base: "openai"}, include_usage=True)
    with (
        caplog.at_level(logging.WARNING, logger="ledger.instrument"),
        openai.OpenAI(api_key="sk", base_url=base, http_client=http, max_retries=0) as client,
    ):
        text, chunks = _stream_text(client)
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None  # type: ignore[attr-defined]
    assert text
    row = rows.only
    assert row.usage_reported and row.status == "ok"
    assert (row.input_tokens, row.output_tokens) == (
        last.usage.prompt_tokens,  # type: ignore[attr-defined]
        last.usage.completion_tokens,  # type: ignore[attr-defined]
    )
    assert row.input_tokens > 0 and row.cost_usd is not None
    assert not [r for r in caplog.records if "include_usage" in r.getMessage()]


def test_include_usage_on_instrument_keeps_the_callers_other_stream_options(
    loopback: LoopbackLLM, rows: Rows
) -> None:
    loopback.queue(Reply.payload("openai_stream_include_usage_real.sse"))
    base = loopback.url + "/v1"
    sdk = openai.OpenAI(api_key="sk", base_url=base, max_retries=0)
    with ledger.instrument(sdk, ledger=rows, providers={base: "openai"}, include_usage=True) as c:
        _stream_text(c, stream_options={"include_obfuscation": False})
    sent = loopback.requests[0].body
    assert sent["stream_options"] == {"include_obfuscation": False, "include_usage": True}
    assert rows.only.usage_reported and rows.only.input_tokens == 78


async def test_async_httpx_client_takes_include_usage_too(sim_server: Server, rows: Rows) -> None:
    base = sim_server[1] + "/v1"
    http = ledger.async_httpx_client(ledger=rows, providers={base: "openai"}, include_usage=True)
    async with openai.AsyncOpenAI(
        api_key="sk", base_url=base, http_client=http, max_retries=0
    ) as client:
        stream = await client.chat.completions.create(
            model="gpt-4o-mini",
            messages=_messages("stream"),  # type: ignore[arg-type]
            stream=True,
        )
        chunks = [c async for c in stream]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert rows.only.usage_reported and rows.only.input_tokens == chunks[-1].usage.prompt_tokens


def test_include_usage_leaves_an_explicit_false_alone(loopback: LoopbackLLM, rows: Rows) -> None:
    no_usage = b"\n\n".join(
        block
        for block in (PAYLOADS / "openai_stream_include_usage_real.sse").read_bytes().split(b"\n\n")
        if b'"usage":{' not in block
    )
    loopback.queue(Reply(no_usage, chunk_size=64, headers={"content-type": "text/event-stream"}))
    base = loopback.url + "/v1"
    http = ledger.httpx_client(ledger=rows, providers={base: "openai"}, include_usage=True)
    with openai.OpenAI(api_key="sk", base_url=base, http_client=http, max_retries=0) as client:
        assert _stream_text(client, stream_options={"include_usage": False})[0]
    assert loopback.requests[0].body["stream_options"] == {"include_usage": False}
    assert (rows.only.status, rows.only.usage_reported) == ("ok", False)
