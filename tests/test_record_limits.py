"""A paid attempt is never lost to one value the ledger cannot store (issue 34, item 4):
what the provider sent back past a column's limit is recorded cut, or dropped, and
named in the ``ledger_repaired`` tag, by the client and the SDK metering transport
alike, on a real database. (The gateway: tests/gateway/test_record_limits.py.)"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from sqlalchemy import select

import ledger
from ledger.events import (
    MAX_TAGS_BYTES,
    REPAIRED_TAG,
    InvalidField,
    UsageEvent,
    recordable,
    to_row,
)
from ledger.schema import STRING_LIMITS, token_usage
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from tests.llm_loopback import PAYLOADS, LoopbackLLM, Reply
from tests.test_client import MESSAGES, client_for

LONG_MODEL = "gpt-4o-mini-" + "x" * 300
LONG_ID = "chatcmpl-" + "y" * 300
#: Gemini's usage lists 1200 modalities: usage_details would be 21 KB of JSON, past 16 KB.
MODALITIES = [{"modality": f"SENSOR_{i:04}", "tokenCount": 1} for i in range(1200)]


def answer(name: str, **changes: Any) -> Reply:
    """The real answer ``name``, with ``changes`` to its top-level fields."""
    body = json.loads((PAYLOADS / name).read_bytes())
    body.update(changes)
    return Reply(json.dumps(body).encode(), headers={"content-type": "application/json"})


def gemini_answer() -> Reply:
    body = json.loads((PAYLOADS / "gemini_generatecontent_cached_thoughts_real.json").read_bytes())
    body["usageMetadata"]["promptTokensDetails"] += MODALITIES
    return Reply(json.dumps(body).encode(), headers={"content-type": "application/json"})


#: (provider, model, the provider's answer, the fields the row names as repaired, a check
#: of the stored row)
CASES: dict[str, tuple[str, str, Reply, str, Callable[[dict[str, Any]], bool]]] = {
    "long-model-and-id": (
        "openai",
        "gpt-4o-mini",
        answer("openai_chat_cached_real.json", model=LONG_MODEL, id=LONG_ID),
        "model,generation_id",
        lambda row: (
            row["model"] == LONG_MODEL[: STRING_LIMITS["model"]]
            and row["generation_id"] == LONG_ID[: STRING_LIMITS["generation_id"]]
            and row["input_tokens"] == 4020
        ),
    ),
    "usage-details-past-16-kb": (
        "gemini",
        "gemini-2.5-flash",
        gemini_answer(),
        "usage_details",
        lambda row: row["usage_details"] is None and row["output_tokens"] > 0,
    ),
}


@pytest.fixture
def book(ledger_url: str, tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(ledger_url, journal_dir=tmp_path / "journal") as opened:
        yield opened


def stored(book: Ledger, ledger_url: str, *, wait: bool = False) -> dict[str, Any]:
    """The one row in the database (``wait``: until it is recorded, up to 10 s)."""
    engine = make_engine(ledger_url)
    try:
        for _ in range(500):
            assert book.flush(10)
            with engine.connect() as conn:
                found = conn.execute(select(token_usage)).mappings().all()
            if found or not wait:
                break
            threading.Event().wait(0.02)
    finally:
        engine.dispose()
    (row,) = found
    return dict(row)


def tags_of(row: dict[str, Any]) -> Any:
    tags = row["tags"]
    return json.loads(tags) if isinstance(tags, str) else tags


@pytest.mark.parametrize("case", CASES)
def test_the_client_records_a_paid_answer_whose_values_the_ledger_cannot_hold(
    server: LoopbackLLM, book: Ledger, ledger_url: str, case: str
) -> None:
    provider, model, reply, repaired, check = CASES[case]
    server.queue(reply)
    with client_for(server, book, provider) as client:
        result = client.chat(MESSAGES, model=model, tags={"app": "demo"})
    assert result.content
    row = stored(book, ledger_url)
    assert check(row) and row["status"] == "ok"
    assert tags_of(row) == {"app": "demo", REPAIRED_TAG: repaired}
    assert result.event.tags == {"app": "demo", REPAIRED_TAG: repaired}  # what was stored


@pytest.mark.parametrize("case", ["long-model-and-id"])  # it meters no Gemini-native call
def test_the_metering_transport_records_a_paid_answer_whose_values_the_ledger_cannot_hold(
    server: LoopbackLLM, book: Ledger, ledger_url: str, case: str
) -> None:
    provider, model, reply, repaired, check = CASES[case]
    server.queue(reply)
    base = server.url + "/v1"
    http = ledger.httpx_client(ledger=book, providers={base: provider})
    with openai.OpenAI(api_key="sk-x", base_url=base, http_client=http) as sdk:
        assert sdk.chat.completions.create(model=model, messages=MESSAGES).choices
    row = stored(book, ledger_url)
    assert check(row) and row["status"] == "ok"
    assert tags_of(row) == {REPAIRED_TAG: repaired}


def test_the_metering_transport_records_a_model_name_too_long_for_its_column(
    server: LoopbackLLM, book: Ledger, ledger_url: str
) -> None:
    # The SDK's call is not the meter's to refuse: it goes as made, its row is cut.
    server.queue(answer("openai_chat_cached_real.json"))
    http = ledger.httpx_client(ledger=book, providers={server.url + "/v1": "openai"})
    sdk = openai.OpenAI(api_key="sk-x", base_url=server.url + "/v1", http_client=http)
    with sdk:
        sdk.chat.completions.create(model=LONG_MODEL, messages=MESSAGES)
    assert server.requests[0].body["model"] == LONG_MODEL
    row = stored(book, ledger_url)
    assert row["requested_model"] == LONG_MODEL[: STRING_LIMITS["requested_model"]]
    assert tags_of(row) == {REPAIRED_TAG: "requested_model"}


def test_the_metering_transport_records_a_routing_value_too_long_for_its_column(
    server: LoopbackLLM, book: Ledger, ledger_url: str
) -> None:
    server.queue(answer("openrouter_chat_doc_example.json"))
    base = server.url + "/api/v1"
    http = ledger.httpx_client(ledger=book, providers={base: "openrouter"})
    with openai.OpenAI(api_key="sk-x", base_url=base, http_client=http) as sdk:
        sdk.chat.completions.create(
            model="deepseek/deepseek-chat",
            messages=MESSAGES,
            extra_body={"provider": {"sort": "s" * 40}},
        )
    row = stored(book, ledger_url)
    assert row["routing_sort"] == "s" * STRING_LIMITS["routing_sort"]
    assert tags_of(row) == {REPAIRED_TAG: "routing_sort"}


def test_tags_that_cannot_take_the_marker_give_way_to_it() -> None:
    event = UsageEvent(
        started_at=dt.datetime.now(dt.UTC),
        requested_provider="openai",
        requested_model="gpt-4o-mini",
        provider="openai",
        status="ok",
        model=LONG_MODEL,
        tags={"note": "n" * (MAX_TAGS_BYTES - 12)},  # fits; with the marker it would not
    )
    fixed = recordable(event)
    to_row(fixed)
    assert fixed.tags == {REPAIRED_TAG: "model,tags"}
    assert fixed.model == LONG_MODEL[: STRING_LIMITS["model"]]
    assert recordable(fixed) is fixed  # a storable event is returned as it is


def test_a_callers_bug_is_refused_not_repaired() -> None:
    event = UsageEvent(
        started_at=dt.datetime(2026, 1, 1),  # naive: not the provider's value to repair
        requested_provider="openai",
        requested_model="gpt-4o-mini",
        provider="openai",
        status="ok",
        model=LONG_MODEL,
    )
    with pytest.raises(InvalidField) as refused:
        recordable(event)
    assert refused.value.field == "started_at"
