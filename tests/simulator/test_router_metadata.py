"""The simulated OpenRouter reports its router's attempts as OpenRouter documents them:
``openrouter_metadata`` when the request opts in, ``provider_responses`` on the generation
record (tests/fixtures/payloads/router_metadata/SOURCES.md names the docs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from ledger.providers.router_metadata import RouterAttempt, parse_router_metadata
from ledger.simulator import Simulator, VirtualClock
from ledger.simulator.faults import Fault, FaultKind
from tests.simulator.conftest import Chat, catalog_of, upstream

ON = {"X-OpenRouter-Metadata": "enabled"}
#: Every key of the docs' response-shape example, and of ``RouterAttempt``.
DOC_KEYS = {"requested", "strategy", "region", "summary", "attempt", "is_byok", "endpoints"}


@pytest.fixture
def chat() -> Iterator[Chat]:
    sim = Simulator(catalog_of(upstream("A", "1"), upstream("B", "3")), clock=VirtualClock())
    chat = Chat(sim)
    yield chat
    chat.client.close()


def _fallback(chat: Chat) -> dict[str, Any]:
    chat.sim.faults.add(Fault(FaultKind.SERVER_ERROR, "openrouter", upstream="A", status=502))
    return chat.body("t", provider={"order": ["a", "b"]})


def test_a_fallback_is_listed_when_the_request_asks(chat: Chat) -> None:
    response = chat.post(_fallback(chat), headers=ON)
    body = response.json()
    assert response.status_code == 200 and body["provider"] == "B"
    meta = body["openrouter_metadata"]
    assert meta.keys() >= DOC_KEYS
    assert meta["attempts"] == [
        {"provider": "A", "model": "test/model", "status": 502},
        {"provider": "B", "model": "test/model", "status": 200},
    ]
    assert meta["attempt"] == 2 and meta["requested"] == "test/model"
    assert meta["endpoints"]["total"] == 2
    assert [e["selected"] for e in meta["endpoints"]["available"]] == [False, True]
    assert meta["generation_time"] > 0
    found = parse_router_metadata(meta)
    assert found is not None and found.attempts == (
        RouterAttempt("A", 502),
        RouterAttempt("B", 200),
    )


@pytest.mark.parametrize(
    ("headers", "carried"),
    [
        ({}, False),
        ({"X-OpenRouter-Metadata": "ENABLED"}, True),  # matched case-insensitively
        ({"X-OpenRouter-Experimental-Metadata": "enabled"}, True),  # the legacy name
        ({"X-OpenRouter-Metadata": "disabled"}, False),
        ({"X-OpenRouter-Metadata": "yes"}, False),  # "any other value ... disabled"
    ],
)
def test_only_an_opted_in_request_gets_the_metadata(
    chat: Chat, headers: dict[str, str], carried: bool
) -> None:
    body = chat.post(chat.body("t"), headers=headers).json()
    assert ("openrouter_metadata" in body) is carried


def test_a_stream_carries_it_on_the_final_chunk_before_done(chat: Chat) -> None:
    with chat.client.stream(
        "POST", "/chat/completions", json={**_fallback(chat), "stream": True}, headers=ON
    ) as response:
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    carrying = [i for i, c in enumerate(chunks) if "openrouter_metadata" in c]
    assert carrying == [len(chunks) - 1]
    assert "usage" in chunks[-1]
    attempts = chunks[-1]["openrouter_metadata"]["attempts"]
    assert [(a["provider"], a["status"]) for a in attempts] == [("A", 502), ("B", 200)]


def test_a_stream_that_breaks_is_no_success_and_carries_none(chat: Chat) -> None:
    chat.sim.faults.add(Fault(FaultKind.MIDSTREAM_ERROR, "openrouter", after_chunks=1))
    with chat.client.stream(
        "POST", "/chat/completions", json=chat.body("t", stream=True), headers=ON
    ) as response:
        text = "".join(response.iter_text())
    assert '"error"' in text and "openrouter_metadata" not in text


def test_the_generation_record_lists_provider_responses(chat: Chat) -> None:
    response = chat.post(_fallback(chat))  # no header: the record has them anyway
    generation = chat.client.get("/generation", params={"id": response.json()["id"]})
    responses = generation.json()["data"]["provider_responses"]
    assert [(r["provider_name"], r["status"]) for r in responses] == [("A", 502), ("B", 200)]
    failed, served = responses
    # The OpenAPI ProviderResponse's fields; the upstream's response id only where it answered.
    assert {"endpoint_id", "is_byok", "latency", "model_permaslug"} <= failed.keys()
    assert "id" not in failed and served["id"].startswith("chatcmpl-")
    assert failed["latency"] == 60  # 0.3 of A's 0.2 s first byte, in ms
    assert served["latency"] > 0
