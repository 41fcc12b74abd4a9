"""Wire formats and scripted faults, through the in-process httpx transports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ledger.simulator import (
    AsyncSimulatorTransport,
    Fault,
    FaultKind,
    Simulator,
    SimulatorTransport,
    VirtualClock,
)

SYSTEM = "You are the reviewer agent; the tool contract follows. " * 100
OR_MODEL = "openai/gpt-4o-mini"


@pytest.fixture
def sim() -> Simulator:
    return Simulator(clock=VirtualClock(), seed=4)


@pytest.fixture
def client(sim: Simulator) -> Iterator[httpx.Client]:
    headers = {"Authorization": "Bearer k", "x-api-key": "k"}
    with httpx.Client(
        transport=SimulatorTransport(sim), base_url="http://sim", headers=headers
    ) as c:
        yield c


def _chat(model: str = OR_MODEL, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "go"}]
    return {"model": model, "messages": messages, **extra}


def _anthropic(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5-20250929",
        "max_tokens": 100,
        "system": [{"type": "text", "text": SYSTEM * 2, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "go"}],
        **extra,
    }


def _data_lines(text: str) -> list[str]:
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


def test_openrouter_response_has_real_fields_and_generation_header(client: httpx.Client) -> None:
    response = client.post("/api/v1/chat/completions", json=_chat())
    body = response.json()
    assert response.headers["x-generation-id"] == body["id"]
    assert body["id"].startswith("gen-") and body["object"] == "chat.completion"
    assert body["provider"] in ("OpenAI", "Azure")
    usage = body["usage"]
    assert set(usage["prompt_tokens_details"]) >= {"cached_tokens", "cache_write_tokens"}
    assert "reasoning_tokens" in usage["completion_tokens_details"]
    assert usage["cost"] == usage["cost_details"]["upstream_inference_cost"] > 0


def test_openrouter_stream_comments_finish_then_usage_then_done(client: httpx.Client) -> None:
    text = client.post("/api/v1/chat/completions", json=_chat(stream=True)).text
    assert text.startswith(": OPENROUTER PROCESSING\n\n")
    data = _data_lines(text)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] > 0
    assert {c["provider"] for c in chunks} == {chunks[0]["provider"]}
    assert {c["id"] for c in chunks} == {chunks[0]["id"]}


def test_openai_stream_reports_usage_only_when_asked(client: httpx.Client) -> None:
    without = [
        json.loads(d)
        for d in _data_lines(
            client.post("/v1/chat/completions", json=_chat("gpt-4o-mini", stream=True)).text
        )[:-1]
    ]
    assert all("usage" not in c for c in without)
    asked = _chat("gpt-4o-mini", stream=True, stream_options={"include_usage": True})
    chunks = [
        json.loads(d)
        for d in _data_lines(client.post("/v1/chat/completions", json=asked).text)[:-1]
    ]
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert chunks[0]["id"].startswith("chatcmpl-")


def test_anthropic_usage_excludes_cache_from_input_tokens(client: httpx.Client) -> None:
    first = client.post("/v1/messages", json=_anthropic()).json()["usage"]
    second = client.post("/v1/messages", json=_anthropic()).json()["usage"]
    assert first["cache_creation_input_tokens"] > 0 and first["cache_read_input_tokens"] == 0
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    total = first["input_tokens"] + first["cache_creation_input_tokens"]
    assert second["input_tokens"] + second["cache_read_input_tokens"] == total


def test_anthropic_stream_event_order_and_cumulative_usage(client: httpx.Client) -> None:
    text = client.post("/v1/messages", json=_anthropic(stream=True)).text
    events = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
    assert events[:3] == ["message_start", "content_block_start", "ping"]
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    payloads = [json.loads(d) for d in _data_lines(text)]
    deltas = [p for p in payloads if p["type"] == "content_block_delta"]
    final = next(p for p in payloads if p["type"] == "message_delta")
    words = sum(len(d["delta"]["text"].split()) for d in deltas)
    assert final["usage"]["output_tokens"] == words


def test_rate_limit_burst_then_recovery_with_retry_after(
    sim: Simulator, client: httpx.Client
) -> None:
    sim.faults.add(Fault(FaultKind.RATE_LIMIT, "openai", count=3, retry_after_s=2.5))
    statuses = [client.post("/v1/chat/completions", json=_chat("gpt-4o-mini")) for _ in range(4)]
    assert [r.status_code for r in statuses] == [429, 429, 429, 200]
    assert statuses[0].headers["retry-after"] == "3"
    assert statuses[0].json()["error"]["code"] == "rate_limit_exceeded"


def test_a_fault_window_on_the_virtual_clock(sim: Simulator, client: httpx.Client) -> None:
    now = sim.clock.time()
    sim.faults.add(
        Fault(FaultKind.SERVER_ERROR, "openai", count=None, start=now, end=now + 60, status=503)
    )
    assert client.post("/v1/chat/completions", json=_chat("gpt-4o-mini")).status_code == 503
    assert isinstance(sim.clock, VirtualClock)
    sim.clock.advance(61)
    assert client.post("/v1/chat/completions", json=_chat("gpt-4o-mini")).status_code == 200


def test_anthropic_error_bodies(sim: Simulator, client: httpx.Client) -> None:
    sim.faults.add(Fault(FaultKind.OVERLOADED, "anthropic"))
    sim.faults.add(Fault(FaultKind.RATE_LIMIT, "anthropic", retry_after_s=9))
    overloaded = client.post("/v1/messages", json=_anthropic())
    limited = client.post("/v1/messages", json=_anthropic())
    assert overloaded.status_code == 529
    assert overloaded.json()["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    assert limited.status_code == 429 and limited.headers["retry-after"] == "9"
    assert limited.json()["type"] == "error" and limited.json()["request_id"].startswith("req_")


def test_openrouter_front_door_429_and_exhausted_upstreams(
    sim: Simulator, client: httpx.Client
) -> None:
    sim.faults.add(Fault(FaultKind.RATE_LIMIT, "openrouter", retry_after_s=4))
    front = client.post("/api/v1/chat/completions", json=_chat())
    assert front.status_code == 429 and front.headers["retry-after"] == "4"
    for name in ("OpenAI", "Azure"):
        sim.faults.add(Fault(FaultKind.SERVER_ERROR, "openrouter", upstream=name, status=502))
    exhausted = client.post("/api/v1/chat/completions", json=_chat())
    error = exhausted.json()["error"]
    assert exhausted.status_code == 502 and error["message"] == "Provider returned error"
    assert [e["provider"] for e in error["metadata"]["previous_errors"]] in (
        ["openai", "azure"],
        ["azure", "openai"],
    )


def test_connection_reset_raises_a_transport_error(sim: Simulator, client: httpx.Client) -> None:
    sim.faults.add(Fault(FaultKind.CONNECTION_RESET, "openrouter"))
    with pytest.raises(httpx.ReadError):
        client.post("/api/v1/chat/completions", json=_chat())


def test_slow_first_byte_delays_the_first_token_on_the_clock(
    sim: Simulator, client: httpx.Client
) -> None:
    sim.faults.add(Fault(FaultKind.SLOW_FIRST_BYTE, "openrouter", delay_s=20))
    start = sim.clock.time()
    with client.stream("POST", "/api/v1/chat/completions", json=_chat(stream=True)) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                break
        first_token = sim.clock.time() - start
    assert first_token >= 20
    assert response.status_code == 200


def test_midstream_error_chunk_on_openrouter(sim: Simulator, client: httpx.Client) -> None:
    sim.faults.add(
        Fault(
            FaultKind.MIDSTREAM_ERROR, "openrouter", upstream="OpenAI", after_chunks=2, count=None
        )
    )
    sim.faults.add(
        Fault(FaultKind.MIDSTREAM_ERROR, "openrouter", upstream="Azure", after_chunks=2, count=None)
    )
    response = client.post("/api/v1/chat/completions", json=_chat(stream=True))
    assert response.status_code == 200
    chunks = [json.loads(d) for d in _data_lines(response.text) if d != "[DONE]"]
    assert len(chunks) == 3
    assert chunks[-1]["error"]["code"] == 502
    assert chunks[-1]["choices"][0]["finish_reason"] == "error"
    # Non-streamed requests cannot break mid-stream: the fault leaves them alone.
    assert client.post("/api/v1/chat/completions", json=_chat()).status_code == 200


def test_malformed_body_is_not_json(sim: Simulator, client: httpx.Client) -> None:
    sim.faults.add(Fault(FaultKind.MALFORMED_BODY, "openai"))
    response = client.post("/v1/chat/completions", json=_chat("gpt-4o-mini"))
    assert response.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        json.loads(response.text)


def test_client_errors(client: httpx.Client) -> None:
    assert client.post("/v1/chat/completions", json=_chat("no-such-model")).status_code == 404
    no_key = httpx.Client(transport=client._transport, base_url="http://sim")
    assert no_key.post("/v1/chat/completions", json=_chat("gpt-4o-mini")).status_code == 401
    assert (
        client.post(
            "/v1/messages", json={"model": "claude-haiku-4-5-20251001", "messages": []}
        ).status_code
        == 400
    )
    too_long = _chat(session_id="x" * 257)
    assert client.post("/api/v1/chat/completions", json=too_long).status_code == 400
    assert client.post("/nowhere", json={}).status_code == 404


async def test_async_transport_streams_chunk_by_chunk(sim: Simulator) -> None:
    transport = AsyncSimulatorTransport(sim)
    async with (
        httpx.AsyncClient(
            transport=transport, base_url="http://sim", headers={"authorization": "Bearer k"}
        ) as c,
        c.stream("POST", "/api/v1/chat/completions", json=_chat(stream=True)) as response,
    ):
        pieces = [chunk async for chunk in response.aiter_raw()]
    assert len(pieces) > 3
    assert pieces[0] == b": OPENROUTER PROCESSING\n\n" and pieces[-1] == b"data: [DONE]\n\n"
