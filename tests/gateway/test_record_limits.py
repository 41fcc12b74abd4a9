"""Through the gateway, a call whose row the ledger could not hold is refused before
anything is sent (400, as ``Call.check`` refuses it on the client), and a paid answer
with values past the ledger's limits is recorded cut and flagged, never dropped."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from ledger.events import REPAIRED_TAG
from ledger.gateway import GatewayApp, parse_config
from ledger.schema import STRING_LIMITS
from ledger.store.ledger import Ledger
from tests.gateway.conftest import KEY, Served, config_table
from tests.llm_loopback import LoopbackLLM, Reply, Rows
from tests.test_record_limits import LONG_ID, LONG_MODEL, answer, stored, tags_of

MESSAGES: Any = [{"role": "user", "content": "What is the capital of the UK?"}]
TOO_LONG = "m" * 300  # requested_model holds 256 characters


@pytest.fixture
def via_loopback(loopback: LoopbackLLM, serve_gateway: Callable[..., Served]) -> Served:
    url = loopback.url
    return serve_gateway(config_table(url + "/v1", url, url + "/api/v1"))


def test_a_model_name_the_ledger_cannot_record_is_refused_before_anything_is_sent(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    loopback.queue(answer("openai_chat_cached_real.json"))
    loopback.queue(answer("anthropic_messages_sdk_snapshot.json"))
    chat = openai.OpenAI(api_key=KEY, base_url=via_loopback.url + "/v1", max_retries=0)
    with chat, pytest.raises(openai.BadRequestError) as refused:
        chat.chat.completions.create(model=f"openai/{TOO_LONG}", messages=MESSAGES)
    assert "'model' cannot be recorded" in refused.value.message
    assert "300 characters, the column holds at most 256" in refused.value.message
    messages = anthropic.Anthropic(api_key=KEY, base_url=via_loopback.url, max_retries=0)
    with messages, pytest.raises(anthropic.BadRequestError) as refused_too:
        messages.messages.create(model=f"anthropic/{TOO_LONG}", max_tokens=20, messages=MESSAGES)
    assert "'model' cannot be recorded" in refused_too.value.message
    assert loopback.requests == [] and rows.events == []  # no provider was paid


def test_a_routing_value_too_long_for_its_column_is_refused_before_anything_is_sent(
    loopback: LoopbackLLM, via_loopback: Served, rows: Rows
) -> None:
    # OpenRouter's provider.sort is recorded as routing_sort (32 characters): it was a 500.
    chat = openai.OpenAI(api_key=KEY, base_url=via_loopback.url + "/v1", max_retries=0)
    with chat, pytest.raises(openai.BadRequestError) as refused:
        chat.chat.completions.create(
            model="openrouter/deepseek/deepseek-chat",
            messages=MESSAGES,
            extra_body={"provider": {"sort": "s" * 40}},
        )
    assert "routing_sort" in refused.value.message
    assert loopback.requests == [] and rows.events == []


@pytest.fixture
def book(ledger_url: str, tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(ledger_url, journal_dir=tmp_path / "journal") as opened:
        yield opened


@pytest.mark.parametrize("stream", [False, True])
def test_a_paid_answer_with_values_past_the_ledgers_limits_is_recorded_cut_and_flagged(
    loopback: LoopbackLLM,
    serve_app: Callable[[GatewayApp], Served],
    book: Ledger,
    ledger_url: str,
    stream: bool,
) -> None:
    url = loopback.url
    table = config_table(url + "/v1", url, url + "/api/v1")
    served = serve_app(GatewayApp(parse_config(table), book, strict=True))
    if stream:
        sse = Path(__file__).parents[1] / "fixtures/payloads/openai_stream_include_usage_real.sse"
        body = sse.read_bytes().replace(b"gpt-4o-mini-2024-07-18", LONG_MODEL.encode())
        body = body.replace(b"chatcmpl-Dx0Xq5Xx9rHB2ehcHZCRDsnuymUXc", LONG_ID.encode())
        loopback.queue(Reply(body, chunk_size=512, headers={"content-type": "text/event-stream"}))
    else:
        loopback.queue(answer("openai_chat_cached_real.json", model=LONG_MODEL, id=LONG_ID))
    chat = openai.OpenAI(api_key=KEY, base_url=served.url + "/v1", max_retries=0)
    with chat:
        if stream:
            chunks = list(
                chat.chat.completions.create(
                    model="openai/gpt-4o-mini", messages=MESSAGES, stream=True
                )
            )
            assert chunks[-1].model == LONG_MODEL  # the client gets the answer as sent
        else:
            done = chat.chat.completions.create(model="openai/gpt-4o-mini", messages=MESSAGES)
            assert (done.model, done.id) == (LONG_MODEL, LONG_ID)
    row = stored(book, ledger_url, wait=True)  # written after the answer's last byte
    assert row["status"] == "ok" and row["output_tokens"] > 0
    assert row["model"] == LONG_MODEL[: STRING_LIMITS["model"]]
    assert row["generation_id"] == LONG_ID[: STRING_LIMITS["generation_id"]]
    assert tags_of(row) == {"team": "search", REPAIRED_TAG: "model,generation_id"}
