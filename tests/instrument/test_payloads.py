"""The metered SDKs against a loopback server replaying real recorded provider payloads:
rows carry the values SOURCES.md lists, and the SDK receives exactly the server's bytes."""

from __future__ import annotations

import gzip
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from sqlalchemy import select

import ledger
from ledger.instrument import InstrumentationError
from ledger.schema import token_usage
from ledger.session_key import session_key
from ledger.store.engine import make_engine
from tests.instrument.conftest import Rows
from tests.llm_loopback import PAYLOADS, LoopbackLLM, Reply
from tests.providers.test_provider_payloads import COUNTERS, EXPECTED

USER = [{"role": "user", "content": "Hi"}]


def sdk_for(name: str, server: LoopbackLLM, http: Any) -> Any:
    """An SDK client pointed where the payload's provider would be."""
    if name.startswith("anthropic"):
        return anthropic.Anthropic(
            api_key="sk-ant-x", base_url=server.url, http_client=http, max_retries=0
        )
    base = server.url + ("/api/v1" if name.startswith("openrouter") else "/v1")
    return openai.OpenAI(api_key="sk-x", base_url=base, http_client=http, max_retries=0)


def call(client: Any, *, stream: bool = False, **kw: Any) -> Any:
    if isinstance(client, anthropic.Anthropic):
        return client.messages.create(
            model="claude-haiku-4-5-20251001", max_tokens=64, messages=USER, stream=stream, **kw
        )
    return client.chat.completions.create(model="m", messages=USER, stream=stream, **kw)


def metered(server: LoopbackLLM, rows: Rows, **options: Any) -> httpx2.Client:
    return ledger.httpx_client(ledger=rows, providers={server.url + "/v1": "openai"}, **options)


@pytest.mark.parametrize(
    "name",
    [
        "openrouter_chat_anthropic_cache_read_write.json",
        "openrouter_chat_xai_cached_no_cost.json",
        "openai_chat_cached_real.json",
        "anthropic_messages_cache_read_write_real.json",
        "openrouter_stream_openai_o3.sse",
        "openai_stream_include_usage_real.sse",
        "anthropic_stream_real_padded.sse",
    ],
)
def test_recorded_payload_gives_the_documented_row(
    name: str, loopback: LoopbackLLM, rows: Rows
) -> None:
    loopback.queue(Reply.payload(name))
    with sdk_for(name, loopback, metered(loopback, rows)) as client:
        result = call(client, stream=name.endswith(".sse"))
        if name.endswith(".sse"):
            list(result)
    row, want = rows.only, EXPECTED[name]
    assert [getattr(row, c) for c in COUNTERS] == [want[c] for c in COUNTERS]
    assert (row.model, row.upstream, row.generation_id) == (
        want["model"],
        want["upstream"],
        want["generation_id"],
    )
    assert row.streamed == name.endswith(".sse") and row.status == "ok"
    if want["provider_cost_usd"] is not None:
        assert (row.cost_usd, row.cost_source) == (want["provider_cost_usd"], "provider")
    else:
        assert row.cost_source != "provider"


def raw_bytes(client: Any, stream: bool) -> bytes:
    api = client.messages if isinstance(client, anthropic.Anthropic) else client.chat.completions
    kw: dict[str, Any] = {"messages": USER, "stream": stream}
    kw["model"] = "claude-haiku-4-5-20251001" if isinstance(client, anthropic.Anthropic) else "m"
    if isinstance(client, anthropic.Anthropic):
        kw["max_tokens"] = 64
    with api.with_streaming_response.create(**kw) as response:
        return b"".join(response.iter_bytes())


@pytest.mark.parametrize(
    "name",
    [
        "openrouter_chat_gemini_cache_write_equals_read.json",
        "openrouter_stream_websearch_gpt41mini.sse",
        "anthropic_stream_web_fetch_real.sse",
    ],
)
def test_sdk_receives_byte_for_byte_what_the_server_sent(
    name: str, loopback: LoopbackLLM, rows: Rows
) -> None:
    sent = (PAYLOADS / name).read_bytes()
    loopback.queue(Reply.payload(name), Reply.payload(name))
    with sdk_for(name, loopback, None) as plain:
        without = raw_bytes(plain, name.endswith(".sse"))
    with sdk_for(name, loopback, metered(loopback, rows)) as client:
        with_transport = raw_bytes(client, name.endswith(".sse"))
    assert without == with_transport == sent
    assert rows.only.input_tokens == EXPECTED[name]["input_tokens"]


def test_gzip_body_reaches_the_sdk_unchanged_and_is_still_parsed(
    loopback: LoopbackLLM, rows: Rows
) -> None:
    name = "openai_chat_cached_real.json"
    plain = (PAYLOADS / name).read_bytes()
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    loopback.queue(Reply(gzip.compress(plain), headers=headers))
    with sdk_for(name, loopback, metered(loopback, rows)) as client:
        assert raw_bytes(client, False) == plain
    assert rows.only.cache_read_tokens == EXPECTED[name]["cache_read_tokens"]


def test_stream_closed_early_is_recorded_as_abandoned_when_closed(
    loopback: LoopbackLLM, rows: Rows
) -> None:
    name = "openrouter_stream_openai_o3.sse"
    loopback.queue(Reply.payload(name, chunk_size=256, delay_s=0.02))
    with sdk_for(name, loopback, metered(loopback, rows)) as client:
        stream = call(client, stream=True)
        next(iter(stream))
        assert rows.events == []  # still open: nothing to record yet
        stream.close()
    row = rows.only
    assert row.streamed and row.generation_id == EXPECTED[name]["generation_id"]
    # Not a served attempt: the SDK left before the end, so its usage is not the call's.
    assert (row.status, row.error_type, row.usage_reported) == ("error", "abandoned", False)
    assert row.input_tokens == 0  # usage had not arrived: nothing invented


def broken_stream_error(client: Any) -> BaseException:
    """What the SDK raises to its caller when the stream's connection drops mid-body."""
    with pytest.raises(Exception) as raised:  # which class: the question
        list(call(client, stream=True))
    return raised.value


def test_broken_stream_gets_a_stream_interrupted_row(loopback: LoopbackLLM, rows: Rows) -> None:
    name = "anthropic_stream_real_padded.sse"
    loopback.queue(*[Reply.payload(name, chunk_size=128, drop_after=5)] * 2)
    with sdk_for(name, loopback, None) as plain:
        unmetered = broken_stream_error(plain)
    with sdk_for(name, loopback, metered(loopback, rows)) as client:
        metered_error = broken_stream_error(client)
    # The caller sees what the SDK raises without metering: its own connection error
    # (anthropic 2.17 wraps the transport's read error in it; earlier releases did not).
    assert type(metered_error) is type(unmetered)
    assert isinstance(metered_error, anthropic.APIConnectionError)
    row = rows.only
    assert (row.status, row.error_type, row.streamed) == ("error", "stream_interrupted", True)
    assert row.generation_id == EXPECTED[name]["generation_id"]


def test_unknown_endpoint_passes_through_untouched(loopback: LoopbackLLM, rows: Rows) -> None:
    body = b'{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.5]}]}'
    loopback.queue(Reply(body, headers={"content-type": "application/json"}))
    with openai.OpenAI(
        api_key="sk-x", base_url=loopback.url + "/v1", http_client=metered(loopback, rows)
    ) as client:
        raw = client.embeddings.with_raw_response.create(model="e", input="x")
        assert raw.http_response.content == body
    assert rows.events == []
    assert loopback.requests[0].path == "/v1/embeddings"


def test_request_headers_carry_context_and_never_reach_the_provider(
    loopback: LoopbackLLM, rows: Rows
) -> None:
    name = "openai_chat_cached_real.json"
    loopback.queue(Reply.payload(name))
    headers = {
        "x-ledger-session-id": "s-header",
        "x-ledger-actor-id": "triager",
        "x-ledger-tags": '{"tenant": "acme"}',
    }
    with (
        sdk_for(name, loopback, metered(loopback, rows)) as client,
        ledger.context(session_id="s-outer", tags={"app": "bot"}),
    ):
        call(client, extra_headers=headers)
    row = rows.only
    assert (row.session_id, row.actor_id) == ("s-header", "triager")
    assert row.tags == {"app": "bot", "tenant": "acme"}
    assert not [h for h in loopback.requests[0].headers if h.startswith("x-ledger-")]


def test_sticky_key_sent_by_default_to_openrouter_only_and_only_with_a_session(
    loopback: LoopbackLLM, rows: Rows
) -> None:
    router, openai_name = "openrouter_chat_doc_example.json", "openai_chat_cached_real.json"
    loopback.queue(*(Reply.payload(n) for n in (router, router, openai_name, router)))
    # sticky_key left at its default throughout
    with sdk_for(router, loopback, metered(loopback, rows)) as client:
        with ledger.context(session_id="s-7", actor_id="planner"):
            call(client)
        call(client)  # no context: nothing to be sticky about
    with (
        sdk_for(openai_name, loopback, metered(loopback, rows)) as client,
        ledger.context(session_id="s-7"),
    ):
        call(client)  # not OpenRouter: the body is never changed
    with (
        sdk_for(router, loopback, metered(loopback, rows)) as client,
        ledger.context(session_id="s-7"),
    ):
        call(client, extra_body={"session_id": "mine"})  # the caller's own key wins
    key = session_key("s-7", "planner")
    assert [r.body.get("session_id") for r in loopback.requests] == [key, None, None, "mine"]
    assert [r.session_key for r in rows.events] == [key, None, None, "mine"]


def test_sticky_key_false_opts_out(loopback: LoopbackLLM, rows: Rows) -> None:
    name = "openrouter_chat_doc_example.json"
    loopback.queue(Reply.payload(name), Reply.payload(name))
    for sticky in (False, True):
        with (
            sdk_for(name, loopback, metered(loopback, rows, sticky_key=sticky)) as client,
            ledger.context(session_id="s-7", actor_id="planner"),
        ):
            call(client)
    sent = [r.body.get("session_id") for r in loopback.requests]
    expected_key = session_key("s-7", "planner")
    assert sent == [None, expected_key]
    assert [r.session_key for r in rows.events] == [None, expected_key]
    assert loopback.requests[1].body["messages"] == USER  # the rest of the body is intact


def test_unusable_body_reaches_the_sdk_and_is_logged_once_in_production(
    loopback: LoopbackLLM,
    rows: Rows,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("LEDGER_STRICT")
    garbage = b"<html>upstream proxy error</html>"
    reply = Reply(garbage, headers={"content-type": "application/json"})
    loopback.queue(reply, reply)
    name = "openai_chat_cached_real.json"
    with sdk_for(name, loopback, metered(loopback, rows)) as client:
        for _ in range(2):
            assert raw_bytes(client, False) == garbage
    assert [(r.status, r.error_type, r.http_status) for r in rows.events] == [
        ("error", "server_error", 200)
    ] * 2
    assert len([r for r in caplog.records if r.name == "ledger.instrument"]) == 1


def test_unusable_body_fails_loudly_in_strict_mode(loopback: LoopbackLLM, rows: Rows) -> None:
    loopback.queue(Reply(b"not json", headers={"content-type": "application/json"}))
    with (
        sdk_for("openai_x", loopback, metered(loopback, rows)) as client,
        pytest.raises(InstrumentationError, match="unusable body"),
    ):
        call(client)


class DownLedger:
    def record(self, event: object) -> str:
        raise RuntimeError("this Ledger is closed")


def test_ledger_down_never_breaks_the_call(
    loopback: LoopbackLLM, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("LEDGER_STRICT")
    name = "openai_chat_cached_real.json"
    loopback.queue(Reply.payload(name), Reply.payload(name))
    http = ledger.httpx_client(ledger=DownLedger())
    with sdk_for(name, loopback, http) as client:
        replies = [call(client) for _ in range(2)]
    assert all(r.usage.prompt_tokens == EXPECTED[name]["input_tokens"] for r in replies)
    warnings = [r for r in caplog.records if r.name == "ledger.instrument"]
    assert len(warnings) == 1 and "could not record" in warnings[0].getMessage()


def test_rows_reach_a_real_ledger_database(loopback: LoopbackLLM, sqlite_url: str) -> None:
    name = "openrouter_chat_anthropic_cache_read_write.json"
    loopback.queue(Reply.payload(name))
    with ledger.Ledger(sqlite_url) as led:
        with (
            sdk_for(name, loopback, ledger.httpx_client(ledger=led)) as client,
            ledger.context(session_id="s-db", actor_id="writer"),
        ):
            call(client)
        assert led.flush(10)
    engine = make_engine(sqlite_url)
    with engine.connect() as conn:
        stored = conn.execute(select(token_usage)).mappings().one()
    engine.dispose()
    assert (stored["session_id"], stored["provider"], stored["upstream"]) == (
        "s-db",
        "openrouter",
        "Anthropic",
    )
    assert stored["cost_usd"] == EXPECTED[name]["provider_cost_usd"]
