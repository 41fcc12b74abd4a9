"""The official openai and anthropic SDKs (plain, streamed, async) through the gateway, in
front of the simulator's real HTTP server: the answers they read and the rows written."""

from __future__ import annotations

import asyncio
import json
import logging
import threading

import anthropic
import httpx
import openai
import pytest

from ledger.simulator import Fault, FaultKind, Simulator
from tests.gateway.conftest import KEY, OTHER_KEY, Rows, Served

MESSAGES = [{"role": "system", "content": "You review code."}, {"role": "user", "content": "hi"}]


def oai(gateway: Served, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=gateway.url + "/v1", max_retries=0)


def claude(gateway: Served, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=key, base_url=gateway.url, max_retries=0)


def test_openai_sdk_plain_call_lands_one_row_with_the_answer_usage(
    gateway: Served, rows: Rows
) -> None:
    with oai(gateway) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini",
            messages=MESSAGES,  # type: ignore[arg-type]
        )
    answer = raw.parse()
    (row,) = rows.wait(1)
    assert answer.choices[0].message.content
    assert answer.usage is not None
    assert (row.provider, row.requested_provider, row.status) == ("openai", "openai", "ok")
    assert (row.model, row.generation_id) == (answer.model, answer.id)
    assert row.input_tokens == answer.usage.prompt_tokens
    assert row.output_tokens == answer.usage.completion_tokens
    assert row.cost_usd is not None and row.cost_source == "computed"
    assert row.tags == {"team": "search"}  # the gateway key's tag
    assert row.session_key is None and row.streamed is False
    assert raw.headers["x-ledger-call-id"] == row.call_id


def test_openai_sdk_stream_gets_no_usage_chunk_it_did_not_ask_for_but_the_row_has_usage(
    gateway: Served, rows: Rows
) -> None:
    with oai(gateway) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-4o-mini",
                messages=MESSAGES,
                stream=True,  # type: ignore[arg-type]
            )
        )
    (row,) = rows.wait(1)
    assert all(c.choices for c in chunks)  # no usage-only chunk
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text and chunks[-1].choices[0].finish_reason == "stop"
    assert row.streamed and row.output_tokens > 0 and row.input_tokens > 0
    assert row.ttft_ms is not None and row.latency_ms is not None


def test_openai_sdk_stream_with_include_usage_sees_the_rows_usage(
    gateway: Served, rows: Rows
) -> None:
    with oai(gateway) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-4o-mini",
                messages=MESSAGES,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    (row,) = rows.wait(1)
    usage = chunks[-1].usage
    assert usage is not None and chunks[-1].choices == []
    assert (usage.prompt_tokens, usage.completion_tokens) == (row.input_tokens, row.output_tokens)


async def test_async_openai_sdk_plain_and_streamed(gateway: Served, rows: Rows) -> None:
    async with openai.AsyncOpenAI(api_key=KEY, base_url=gateway.url + "/v1", max_retries=0) as c:
        plain, stream = await asyncio.gather(
            c.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES),  # type: ignore[arg-type]
            c.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True),  # type: ignore[arg-type]
        )
        text = [chunk.choices[0].delta.content or "" async for chunk in stream]
    events = rows.wait(2)
    assert plain.choices[0].message.content and "".join(text)
    assert sorted(e.streamed for e in events) == [False, True]
    assert len({e.call_id for e in events}) == 2


def test_anthropic_sdk_plain_and_streamed(gateway: Served, rows: Rows) -> None:
    with claude(gateway) as client:
        message = client.messages.create(
            model="claude-haiku", max_tokens=200, messages=[{"role": "user", "content": "hi"}]
        )
        with client.messages.stream(
            model="claude-haiku", max_tokens=200, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    plain_row, stream_row = rows.wait(2)
    assert message.content[0].type == "text" and text
    assert plain_row.provider == "anthropic" and plain_row.generation_id == message.id
    assert plain_row.output_tokens == message.usage.output_tokens
    assert stream_row.streamed and stream_row.output_tokens == final.usage.output_tokens


async def test_async_anthropic_sdk(gateway: Served, rows: Rows) -> None:
    async with anthropic.AsyncAnthropic(api_key=KEY, base_url=gateway.url, max_retries=0) as c:
        message = await c.messages.create(
            model="claude-haiku", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        )
        async with c.messages.stream(
            model="claude-haiku", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            text = [t async for t in stream.text_stream]
    assert message.content and "".join(text)
    assert [e.streamed for e in rows.wait(2)] == [False, True]


def test_openrouter_passthrough_gets_the_sticky_key_and_records_the_upstream(
    gateway: Served, rows: Rows
) -> None:
    with oai(gateway) as client:
        answer = client.chat.completions.create(
            model="openrouter/openai/gpt-4o-mini",
            messages=MESSAGES,  # type: ignore[arg-type]
            extra_headers={"x-session-id": "s-42", "x-actor-id": "planner"},
        )
    (row,) = rows.wait(1)
    assert row.provider == "openrouter" and row.requested_model == "openai/gpt-4o-mini"
    assert row.session_key == "ledger:s-42:planner"
    assert (row.session_id, row.actor_id) == ("s-42", "planner")
    assert row.upstream == answer.model_extra["provider"]  # type: ignore[index]
    assert row.cost_source == "provider"


def test_cascade_falls_back_from_openai_429_to_anthropic_translated(
    sim: tuple[Simulator, str], gateway: Served, rows: Rows
) -> None:
    sim[0].faults.add(Fault(FaultKind.RATE_LIMIT, "openai", count=1, retry_after_s=3))
    with oai(gateway) as client:
        answer = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    failed, served = rows.wait(2)
    assert answer.object == "chat.completion" and answer.choices[0].message.content
    assert answer.model.startswith("claude-haiku")
    assert (failed.provider, failed.status, failed.error_type) == (
        "openai",
        "error",
        "rate_limited",
    )
    assert (served.provider, served.status, served.attempt) == ("anthropic", "ok", 2)
    assert failed.call_id == served.call_id
    assert served.requested_provider == "openai" and served.requested_model == "gpt-4o-mini"
    assert answer.usage is not None and answer.usage.completion_tokens == served.output_tokens


@pytest.mark.parametrize("kind", [FaultKind.SERVER_ERROR, FaultKind.CONNECTION_RESET])
def test_cascade_streams_from_anthropic_after_openai_fails(
    sim: tuple[Simulator, str], gateway: Served, rows: Rows, kind: FaultKind
) -> None:
    sim[0].faults.add(Fault(kind, "openai", count=1))
    with oai(gateway) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-4o-mini",
                messages=MESSAGES,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    failed, served = rows.wait(2)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == served.output_tokens
    assert failed.error_type == ("server_error" if kind is FaultKind.SERVER_ERROR else "transport")
    assert served.provider == "anthropic" and served.streamed


def test_all_routes_failing_is_a_localized_503_with_retry_after(
    sim: tuple[Simulator, str], gateway: Served, rows: Rows
) -> None:
    sim[0].faults.add(Fault(FaultKind.SERVER_ERROR, "openai", count=1))
    sim[0].faults.add(Fault(FaultKind.OVERLOADED, "anthropic", count=1))
    with oai(gateway) as client, pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=MESSAGES,  # type: ignore[arg-type]
            extra_headers={"x-ledger-locale": "pt-BR"},
        )
    assert caught.value.status_code == 503
    assert int(caught.value.response.headers["retry-after"]) >= 1
    assert "Tente novamente" in caught.value.message
    assert [e.status for e in rows.wait(2)] == ["error", "error"]


def test_untranslatable_feature_is_a_400_naming_it_before_anything_is_sent(
    gateway: Served, rows: Rows
) -> None:
    with oai(gateway) as client, pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=MESSAGES,
            logprobs=True,  # type: ignore[arg-type]
        )
    assert "'logprobs'" in caught.value.message
    assert rows.events == []


def test_missing_or_wrong_gateway_key_is_401_for_both_sdks_and_never_echoed(
    gateway: Served, rows: Rows
) -> None:
    wrong = "lgw-not-a-key-we-know-123456"
    with oai(gateway, wrong) as client, pytest.raises(openai.AuthenticationError) as caught:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    assert wrong not in caught.value.response.text
    with claude(gateway, wrong) as c, pytest.raises(anthropic.AuthenticationError):
        c.messages.create(
            model="claude-haiku", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert httpx.post(gateway.url + "/v1/chat/completions", json={}).status_code == 401
    assert rows.events == []


def test_unknown_model_is_404_and_models_lists_the_public_names(gateway: Served) -> None:
    with oai(gateway) as client:
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="nope", messages=MESSAGES)  # type: ignore[arg-type]
        assert [m.id for m in client.models.list()][:2] == ["claude-haiku", "gpt-4o-mini"]
    assert httpx.get(gateway.url + "/healthz").json() == {"status": "ok"}


def test_rate_limit_per_gateway_key_raises_each_sdks_rate_limit_error(
    sim: tuple[Simulator, str], serve_gateway: object, rows: Rows
) -> None:
    from tests.gateway.conftest import sim_table

    served = serve_gateway(sim_table(sim[1], rate_limit="2/60s"))  # type: ignore[operator]
    with oai(served) as client:
        for _ in range(2):
            client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
        with pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    assert int(caught.value.response.headers["retry-after"]) >= 1
    with claude(served) as c, pytest.raises(anthropic.RateLimitError):
        c.messages.create(
            model="claude-haiku", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    with oai(served, OTHER_KEY) as other:  # another key has its own window
        assert other.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES).choices  # type: ignore[arg-type]
    assert len(rows.wait(3)) == 3


def test_budget_refusal_is_a_rate_limit_error_naming_the_budget(
    sim: tuple[Simulator, str], serve_gateway: object, rows: Rows
) -> None:
    from decimal import Decimal

    from ledger.budgets import Budget, BudgetGuard
    from ledger.gateway import parse_config
    from ledger.gateway.app import GatewayApp
    from ledger.gateway.upstream import Upstreams
    from tests.gateway.conftest import sim_table

    guard = BudgetGuard([Budget("mini_daily", "model_day", {"limit_usd": Decimal("0.000001")})])
    config = parse_config(sim_table(sim[1]))
    served = serve_gateway(  # type: ignore[operator]
        sim_table(sim[1]), upstreams=Upstreams(config, rows, guard=guard, strict=True)
    )
    assert isinstance(served.app, GatewayApp)
    with oai(served) as client, pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=100)  # type: ignore[arg-type]
    assert "mini_daily" in caught.value.message
    assert rows.events == []  # nothing was sent


def test_access_log_is_one_json_line_without_keys_or_bodies(
    gateway: Served, rows: Rows, caplog: pytest.LogCaptureFixture
) -> None:
    def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "ledger.gateway.access"]

    with caplog.at_level(logging.INFO, logger="ledger.gateway.access"), oai(gateway) as client:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
        rows.wait(1)
        for _ in range(1500):  # the line is written once the call's coroutine ends
            if lines():
                break
            threading.Event().wait(0.02)
    entries = lines()
    entry = json.loads(entries[-1])
    assert entry["status"] == 200 and entry["key"] == "search" and entry["provider"] == "openai"
    assert entry["call_id"] == rows.events[0].call_id
    text = "\n".join(entries)
    assert KEY not in text and "You review code" not in text and "sk-provider" not in text


def test_response_cache_serves_identical_plain_calls_once_and_records_the_hits(
    sim: tuple[Simulator, str], serve_gateway: object, rows: Rows
) -> None:
    from tests.gateway.conftest import sim_table

    served = serve_gateway(sim_table(sim[1], response_cache=True))  # type: ignore[operator]
    ask = {"model": "gpt-4o-mini", "messages": MESSAGES}
    with oai(served) as client, oai(served, OTHER_KEY) as other:
        first = client.chat.completions.with_raw_response.create(**ask)  # type: ignore[arg-type]
        second = other.chat.completions.with_raw_response.create(**ask)  # type: ignore[arg-type]
        paused = client.chat.completions.with_raw_response.create(
            **ask,
            extra_headers={"x-ledger-paused": "true"},  # type: ignore[arg-type]
        )
        french = client.chat.completions.with_raw_response.create(
            **ask,
            extra_headers={"x-ledger-locale": "fr"},  # type: ignore[arg-type]
        )
    assert [r.headers.get("x-ledger-cache") for r in (first, second)] == ["miss", "hit"]
    assert second.parse().choices[0].message.content == first.parse().choices[0].message.content
    assert paused.headers.get("x-ledger-cache") is None  # a paused turn never touches it
    assert french.headers["x-ledger-cache"] == "miss"  # another locale is another question
    computed, hit, paused_row, french_row = rows.wait(4)
    assert (hit.attempt, hit.response_cache_hit, hit.cost_usd) == (0, True, None)
    assert (hit.provider, hit.model) == (computed.provider, computed.model)
    assert hit.tags == {"team": "ops"}  # the asker's identity, not the first caller's
    assert paused_row.paused and not paused_row.response_cache_hit
    assert not french_row.response_cache_hit


def test_an_anthropic_sdk_falls_back_to_openai_and_reads_anthropic_answers(
    sim: tuple[Simulator, str], serve_gateway: object, rows: Rows
) -> None:
    from tests.gateway.conftest import sim_table

    chain = ["anthropic:claude-haiku-4-5-20251001", "openai:gpt-4o-mini"]
    served = serve_gateway(sim_table(sim[1], models={"mixed": chain}))  # type: ignore[operator]
    sim[0].faults.add(Fault(FaultKind.OVERLOADED, "anthropic", count=2))
    ask = {"model": "mixed", "max_tokens": 50, "messages": [{"role": "user", "content": "x"}]}
    with claude(served) as c:
        message = c.messages.create(**ask)  # type: ignore[arg-type]
        with c.messages.stream(**ask) as stream:  # type: ignore[arg-type]
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        with pytest.raises(anthropic.BadRequestError) as caught:
            c.messages.create(**ask, extra_body={"top_k": 5})  # type: ignore[arg-type]
    assert message.type == "message" and message.content[0].type == "text"
    assert message.model.startswith("gpt-4o-mini") and text
    events = rows.wait(4)
    assert [(e.provider, e.status) for e in events] == [
        ("anthropic", "error"),
        ("openai", "ok"),
        ("anthropic", "error"),
        ("openai", "ok"),
    ]
    assert message.usage.output_tokens == events[1].output_tokens
    assert final.usage.output_tokens == events[3].output_tokens
    assert "'top_k'" in caught.value.message and len(rows.events) == 4
