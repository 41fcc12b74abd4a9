"""The metering transport asks OpenRouter for its router metadata and records the
attempts; the SDK receives what OpenRouter sent, the added field included."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

import ledger
from ledger.simulator import Fault, FaultKind, Simulator, VirtualClock, serve_in_thread
from tests.instrument.conftest import Rows
from tests.llm_loopback import LoopbackLLM, Reply
from tests.simulator.conftest import MODEL, catalog_of, upstream

ORDER: Any = {"provider": {"order": ["a", "b"]}}


@pytest.fixture
def fallback_server() -> Iterator[str]:
    sim = Simulator(catalog_of(upstream("A", "1"), upstream("B", "3")), clock=VirtualClock())
    sim.faults.add(Fault(FaultKind.SERVER_ERROR, "openrouter", upstream="A", count=None))
    with serve_in_thread(sim) as url:
        yield url + "/api/v1"


def _sdk(base: str, rows: Rows, **options: Any) -> openai.OpenAI:
    http = ledger.httpx_client(ledger=rows, **options)
    return openai.OpenAI(api_key="sk-or", base_url=base, http_client=http, max_retries=0)


def _attempts(rows: Rows) -> list[Any]:
    return [[(a["upstream"], a["status"]) for a in e.router_attempts or ()] for e in rows.events]


def test_the_sdk_gets_the_metadata_and_the_row_the_attempts(
    fallback_server: str, rows: Rows
) -> None:
    messages: Any = [{"role": "user", "content": "hi"}]
    with _sdk(fallback_server, rows) as client:
        done = client.chat.completions.create(model=MODEL, messages=messages, extra_body=ORDER)
        stream = client.chat.completions.create(
            model=MODEL, messages=messages, extra_body=ORDER, stream=True
        )
        last = list(stream)[-1]
    assert done.choices[0].message.content  # the SDK's answer, as ever
    assert done.model_extra is not None
    assert [a["provider"] for a in done.model_extra["openrouter_metadata"]["attempts"]] == [
        "A",
        "B",
    ]
    assert last.model_extra is not None and "openrouter_metadata" in last.model_extra
    assert _attempts(rows) == [[("A", 500), ("B", 200)]] * 2
    assert [e.upstream for e in rows.events] == ["B", "B"]


def test_meter_router_metadata_false_sends_no_header_and_records_none(
    fallback_server: str, rows: Rows
) -> None:
    messages: Any = [{"role": "user", "content": "hi"}]
    with _sdk(fallback_server, rows, router_metadata=False) as client:
        done = client.chat.completions.create(model=MODEL, messages=messages, extra_body=ORDER)
    assert done.model_extra is not None and "openrouter_metadata" not in done.model_extra
    assert [e.router_attempts for e in rows.events] == [None]


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ({}, "enabled"),
        ({"X-OpenRouter-Metadata": "disabled"}, "disabled"),  # the caller's choice stays
        ({"X-OpenRouter-Experimental-Metadata": "enabled"}, None),  # so does the legacy name
    ],
)
def test_the_header_goes_to_openrouter_only_and_never_over_the_callers(
    rows: Rows, sent: dict[str, str], expected: str | None
) -> None:
    messages: Any = [{"role": "user", "content": "hi"}]
    with LoopbackLLM() as server:
        server.default = Reply.payload("openrouter_chat_doc_example.json")
        with _sdk(server.url + "/api/v1", rows) as client:
            client.chat.completions.create(model="m", messages=messages, extra_headers=sent)
        with _sdk(server.url + "/v1", rows, providers={server.url + "/v1": "openai"}) as client:
            client.chat.completions.create(model="m", messages=messages)
        to_openrouter, to_openai = server.requests
    assert to_openrouter.headers.get("x-openrouter-metadata") == expected
    assert "x-openrouter-metadata" not in to_openai.headers
