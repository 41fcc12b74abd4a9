"""The relay against a scripted loopback server: what goes upstream (sticky key only to
OpenRouter, provider keys not gateway keys), bytes passed on unchanged, 4xx not retried,
an error before the first token falling back, a client disconnect recorded."""

from __future__ import annotations

import threading
from collections.abc import Callable

import httpx
import openai
import pytest

from tests.gateway.conftest import KEY, Rows, Served, config_table
from tests.llm_loopback import PAYLOADS, LoopbackLLM, Reply

MESSAGES = [{"role": "user", "content": "What is the capital of the UK?"}]
AUTH = {"authorization": f"Bearer {KEY}"}


@pytest.fixture
def via_loopback(loopback: LoopbackLLM, serve_gateway: Callable[..., Served]) -> Served:
    url = loopback.url
    return serve_gateway(config_table(url + "/v1", url, url + "/api/v1"))


def test_body_goes_upstream_as_sent_with_the_provider_key_and_nothing_of_ours(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    loopback.queue(Reply.payload("openai_chat_cached_real.json"))
    body = {
        "model": "openai/gpt-4o-mini",  # a chain crossing to Anthropic would refuse "seed"
        "messages": MESSAGES,
        "seed": 7,
        "metadata": {"ticket": "T-1"},
        "session_id": "s-1",
    }
    headers = {**AUTH, "x-actor-id": "planner", "x-ledger-tags": '{"run": "ci-1"}'}
    answer = httpx.post(via_loopback.url + "/v1/chat/completions", json=body, headers=headers)
    assert answer.status_code == 200
    (sent,) = loopback.requests
    assert sent.path == "/v1/chat/completions"
    expected = {k: v for k, v in body.items() if k != "session_id"}  # no key for OpenAI
    assert sent.body == {**expected, "model": "gpt-4o-mini"}
    assert sent.headers["authorization"] == "Bearer sk-provider-openai-secret-0001"
    assert KEY not in str(sent.headers) and not any(h.startswith("x-ledger") for h in sent.headers)
    assert "x-actor-id" not in sent.headers
    (row,) = rows.wait(1)
    assert (row.session_id, row.actor_id, row.session_key) == ("s-1", "planner", None)
    assert row.tags == {"run": "ci-1", "team": "search"}


def test_only_openrouter_receives_the_sticky_key(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    loopback.queue(Reply.payload("openrouter_chat_doc_example.json"))
    loopback.queue(Reply.payload("anthropic_messages_sdk_snapshot.json"))
    ids = {**AUTH, "x-session-id": "s-9", "x-actor-id": "coder"}
    for model, url in (
        ("openrouter/deepseek/deepseek-chat", "/v1/chat/completions"),
        ("claude-haiku", "/v1/messages"),
    ):
        body = {"model": model, "messages": MESSAGES, "max_tokens": 20}
        assert httpx.post(via_loopback.url + url, json=body, headers=ids).status_code == 200
    to_openrouter, to_anthropic = loopback.requests
    assert to_openrouter.path == "/api/v1/chat/completions"
    assert to_openrouter.body["session_id"] == "ledger:s-9:coder"
    assert to_openrouter.body["model"] == "deepseek/deepseek-chat"
    assert "session_id" not in to_anthropic.body
    assert to_anthropic.headers["x-api-key"] == "sk-ant-provider-secret-0002"
    keys = [e.session_key for e in rows.wait(2)]
    assert keys == ["ledger:s-9:coder", None]


def test_streamed_bytes_reach_the_client_unchanged(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    loopback.queue(Reply.payload("openai_stream_include_usage_real.sse"))
    body = {
        "model": "gpt-4o-mini",
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream(
        "POST", via_loopback.url + "/v1/chat/completions", json=body, headers=AUTH
    ) as r:
        received = r.read()
    assert r.headers["content-type"].startswith("text/event-stream")
    assert received == (PAYLOADS / "openai_stream_include_usage_real.sse").read_bytes()
    (row,) = rows.wait(1)
    assert row.input_tokens > 0 and row.output_tokens > 0


def test_a_client_error_is_answered_at_once_and_not_retried_on_the_fallback(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    error = b'{"error": {"message": "Invalid value for messages", "type": "invalid_request_error"}}'
    loopback.queue(Reply(error, status=400, headers={"content-type": "application/json"}))
    client = openai.OpenAI(api_key=KEY, base_url=via_loopback.url + "/v1", max_retries=0)
    with client, pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    assert "Invalid value for messages" in caught.value.message
    assert len(loopback.requests) == 1  # Anthropic was never asked
    (row,) = rows.wait(1)
    assert (row.error_type, row.http_status) == ("client_error", 400)


def test_a_provider_echoing_its_key_never_reaches_the_client(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    echo = b'{"error": {"message": "Incorrect API key provided: sk-provider-openai-secret-0001"}}'
    loopback.queue(Reply(echo, status=401, headers={"content-type": "application/json"}))
    answer = httpx.post(
        via_loopback.url + "/v1/chat/completions",
        json={"model": "gpt-4o-mini", "messages": MESSAGES},
        headers=AUTH,
    )
    assert answer.status_code == 401
    assert "sk-provider-openai-secret-0001" not in answer.text and "***" in answer.text


def test_an_error_before_the_first_token_falls_back_and_the_client_sees_one_clean_stream(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    early = b'data: {"error": {"message": "upstream overloaded", "code": 502}}\n\n'
    loopback.queue(Reply(early, chunk_size=64, headers={"content-type": "text/event-stream"}))
    loopback.queue(Reply.payload("anthropic_stream_sdk_fixture.sse"))
    client = openai.OpenAI(api_key=KEY, base_url=via_loopback.url + "/v1", max_retries=0)
    with client:
        chunks = list(
            client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)  # type: ignore[arg-type]
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    failed, served = rows.wait(2)
    assert (failed.error_type, failed.provider) == ("stream_interrupted", "openai")
    assert (served.provider, served.status) == ("anthropic", "ok")


def test_a_client_that_disconnects_mid_stream_cancels_upstream_and_the_row_says_so(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    # 24 events in 64-byte chunks, 0.25 s apart: a minute in all, unless cancelled.
    loopback.queue(Reply.payload("openai_stream_include_usage_real.sse", delay_s=0.25))
    body = {"model": "openai/gpt-4o-mini", "messages": MESSAGES, "stream": True}
    with httpx.stream(
        "POST", via_loopback.url + "/v1/chat/completions", json=body, headers=AUTH
    ) as r:
        first = next(r.iter_raw())
    assert first.startswith(b"data: ")
    (row,) = rows.wait(1, timeout=30)
    for _ in range(1500):  # the upstream saw the gateway hang up, well before a minute
        if loopback.disconnects:
            break
        threading.Event().wait(0.02)
    assert loopback.disconnects == 1
    assert row.tags == {"team": "search", "disconnected": "client"}
    # abandoned: its usage is partial, so it is never read as a served attempt
    assert (row.status, row.error_type, row.usage_reported) == ("error", "abandoned", False)
    assert row.streamed and row.latency_ms is not None
    assert row.latency_ms < 30_000  # cut short: the whole stream would take a minute
