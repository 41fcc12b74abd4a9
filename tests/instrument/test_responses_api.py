"""The real ``openai`` SDK's Responses API (``client.responses.create``), metered, against a
loopback server replaying recorded Responses payloads: plain and streamed calls become
rows with the values SOURCES.md lists, and the SDK gets exactly what the server sent."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

import ledger
from tests.instrument.conftest import Rows
from tests.llm_loopback import PAYLOADS, LoopbackLLM, Reply
from tests.providers.test_provider_payloads import COUNTERS, EXPECTED


def client_for(name: str, server: LoopbackLLM, rows: Rows | None) -> openai.OpenAI:
    """An SDK client where the payload's provider would be (OpenRouter under ``/api/v1``);
    only ``/v1`` is mapped explicitly, so OpenRouter is recognised by its path alone."""
    http = None
    if rows is not None:
        http = ledger.httpx_client(ledger=rows, providers={server.url + "/v1": "openai"})
    base = server.url + ("/api/v1" if name.startswith("openrouter") else "/v1")
    return openai.OpenAI(api_key="sk-x", base_url=base, http_client=http, max_retries=0)


def assert_documented_row(rows: Rows, name: str, *, streamed: bool) -> None:
    row, want = rows.only, EXPECTED[name]
    assert [getattr(row, c) for c in COUNTERS] == [want[c] for c in COUNTERS]
    assert (row.model, row.upstream, row.generation_id) == (
        want["model"],
        want["upstream"],
        want["generation_id"],
    )
    assert (row.status, row.streamed) == ("ok", streamed)
    if want["provider_cost_usd"] is not None:
        assert (row.cost_usd, row.cost_source) == (want["provider_cost_usd"], "provider")
    else:
        assert row.cost_source != "provider"


@pytest.mark.parametrize(
    "name", ["openai_responses_simple_real.json", "openai_responses_sdk_snapshot_real.json"]
)
def test_plain_responses_call_is_recorded(name: str, loopback: LoopbackLLM, rows: Rows) -> None:
    loopback.queue(Reply.payload(name))
    with client_for(name, loopback, rows) as client:
        response = client.responses.create(model="gpt-4o", input="Hi")
    assert (
        response.output_text
        == json.loads((PAYLOADS / name).read_bytes())["output"][0]["content"][0]["text"]
    )
    assert loopback.requests[0].path == "/v1/responses"
    assert_documented_row(rows, name, streamed=False)
    assert rows.only.requested_model == "gpt-4o" and rows.only.provider == "openai"


@pytest.mark.parametrize(
    ("name", "provider", "text"),
    [
        ("openai_responses_stream_moderation_real.sse", "openai", "Paris."),
        ("openrouter_responses_stream_gpt_oss_reasoning.sse", "openrouter", "4"),
    ],
)
def test_streamed_responses_call_is_recorded_when_the_stream_ends(
    name: str, provider: str, text: str, loopback: LoopbackLLM, rows: Rows
) -> None:
    loopback.queue(Reply.payload(name, chunk_size=64))
    with client_for(name, loopback, rows) as client:
        events = list(client.responses.create(model="gpt-5", input="Hi", stream=True))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == text and events[-1].type == "response.completed"
    assert_documented_row(rows, name, streamed=True)
    row = rows.only
    assert row.provider == provider and row.ttft_ms is not None
    assert row.ttft_ms <= row.latency_ms


@pytest.mark.parametrize(
    "name",
    ["openai_responses_stream_moderation_real.sse", "openai_responses_sdk_snapshot_real.json"],
)
def test_sdk_receives_byte_for_byte_what_the_server_sent(
    name: str, loopback: LoopbackLLM, rows: Rows
) -> None:
    streamed = name.endswith(".sse")
    loopback.queue(Reply.payload(name), Reply.payload(name))

    def raw(client: openai.OpenAI) -> bytes:
        api = client.responses.with_streaming_response
        with api.create(model="gpt-5", input="Hi", stream=streamed) as response:
            return b"".join(response.iter_bytes())

    with client_for(name, loopback, None) as plain:
        without = raw(plain)
    with client_for(name, loopback, rows) as metered:
        with_transport = raw(metered)
    assert without == with_transport == (PAYLOADS / name).read_bytes()
    assert rows.only.input_tokens == EXPECTED[name]["input_tokens"]


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)


CREATED = {
    "type": "response.created",
    "sequence_number": 0,
    "response": {"id": "resp_x", "object": "response", "model": "gpt-5", "status": "in_progress"},
}
DELTA = {"type": "response.output_text.delta", "sequence_number": 1, "delta": "Pa"}


@pytest.mark.parametrize(
    "last",
    [
        {"type": "error", "sequence_number": 2, "code": "server_error", "message": "boom"},
        {
            "type": "response.failed",
            "sequence_number": 2,
            "response": {
                "id": "resp_x",
                "object": "response",
                "model": "gpt-5",
                "status": "failed",
                "error": {"code": "server_error", "message": "boom"},
                "usage": {"input_tokens": 12, "output_tokens": 1},
            },
        },
    ],
    ids=["error-event", "response-failed"],
)
def test_in_band_stream_failure_gets_an_error_row(
    last: dict[str, Any], loopback: LoopbackLLM, rows: Rows
) -> None:
    headers = {"content-type": "text/event-stream"}
    loopback.queue(Reply(sse(CREATED, DELTA, last), headers=headers, chunk_size=32))
    with client_for("openai_x", loopback, rows) as client:
        events = list(client.responses.create(model="gpt-5", input="Hi", stream=True))
    assert events[-1].type == last["type"]  # the SDK saw the whole stream
    row = rows.only
    assert (row.status, row.error_type, row.streamed) == ("error", "stream_interrupted", True)
    assert row.generation_id == "resp_x"
    assert row.input_tokens == (12 if last["type"] == "response.failed" else 0)


def test_sdk_retry_of_a_responses_call_shares_the_call_id(
    loopback: LoopbackLLM, rows: Rows
) -> None:
    name = "openai_responses_simple_real.json"
    busy = Reply(
        b'{"error": {"message": "Rate limit reached", "type": "requests", "code": null}}',
        status=429,
        headers={"content-type": "application/json", "retry-after-ms": "1"},
    )
    loopback.queue(busy, Reply.payload(name))
    http = ledger.httpx_client(ledger=rows, providers={loopback.url + "/v1": "openai"})
    with openai.OpenAI(
        api_key="sk-x", base_url=loopback.url + "/v1", http_client=http, max_retries=1
    ) as client:
        client.responses.create(model="gpt-4o", input="Hi")
    first, second = rows.events
    assert (first.attempt, first.status, first.error_type) == (1, "error", "rate_limited")
    assert (second.attempt, second.status) == (2, "ok") and first.call_id == second.call_id
    assert second.input_tokens == EXPECTED[name]["input_tokens"]


def test_sticky_key_is_never_added_to_a_responses_call(loopback: LoopbackLLM, rows: Rows) -> None:
    name = "openrouter_responses_stream_gpt_oss_reasoning.sse"
    loopback.queue(Reply.payload(name))
    http = ledger.httpx_client(ledger=rows, sticky_key=True)
    with (
        openai.OpenAI(api_key="sk-x", base_url=loopback.url + "/api/v1", http_client=http) as c,
        ledger.context(session_id="s-1", actor_id="planner"),
    ):
        list(c.responses.create(model="openai/gpt-oss-20b", input="Hi", stream=True))
    assert "session_id" not in loopback.requests[0].body
    assert rows.only.provider == "openrouter" and rows.only.session_key is None
