"""ADR-0014's confirmation tests: a real loopback OpenAI and Anthropic, a real ledger."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ledger.cascade import AsyncCascade, Cascade, RetryPolicy, Route
from ledger.client import AsyncClient, Client
from ledger.errors import (
    AllProvidersFailed,
    ProviderClientError,
    ProviderConfigurationError,
    StreamInterrupted,
)
from ledger.providers import make_provider
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from tests.llm_loopback import LoopbackLLM, Reply

KEY = "sk-test-0123456789abcdef"
MESSAGES = [{"role": "user", "content": "Summarise the incident report."}]

# What each provider bills per million tokens, from their price pages
# (gpt-4o-mini; claude-haiku-4-5): the servers' side of the bill.
OPENAI_USD_PER_MTOK = {
    "input": Decimal("0.15"),
    "cached": Decimal("0.075"),
    "output": Decimal("0.6"),
}
HAIKU_USD_PER_MTOK = {"input": Decimal("1"), "read": Decimal("0.1"), "output": Decimal("5")}


def openai_ok(prompt: int, cached: int, output: int) -> Reply:
    body = {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "created": 1764500000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "All good."},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": output,
            "total_tokens": prompt + output,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }
    return Reply(json.dumps(body).encode(), headers={"content-type": "application/json"})


def openai_bill(prompt: int, cached: int, output: int) -> Decimal:
    p = OPENAI_USD_PER_MTOK
    return ((prompt - cached) * p["input"] + cached * p["cached"] + output * p["output"]) / 10**6


def anthropic_ok(uncached: int, read: int, output: int) -> Reply:
    body = {
        "id": "msg_loopback",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5-20251001",
        "content": [{"type": "text", "text": "All good."}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": uncached,
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": 0,
            "output_tokens": output,
        },
    }
    return Reply(json.dumps(body).encode(), headers={"content-type": "application/json"})


def anthropic_bill(uncached: int, read: int, output: int) -> Decimal:
    p = HAIKU_USD_PER_MTOK
    return (uncached * p["input"] + read * p["read"] + output * p["output"]) / 10**6


def openai_error(status: int, **headers: str) -> Reply:
    body = {"error": {"message": f"upstream said {status}", "type": "error", "code": None}}
    return Reply(
        json.dumps(body).encode(),
        status=status,
        headers={"content-type": "application/json", **headers},
    )


def anthropic_error(status: int, kind: str, **headers: str) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": f"{kind} now"}}
    return Reply(
        json.dumps(body).encode(),
        status=status,
        headers={"content-type": "application/json", **headers},
    )


@pytest.fixture
def servers() -> Iterator[tuple[LoopbackLLM, LoopbackLLM]]:
    with LoopbackLLM() as openai, LoopbackLLM() as anthropic:
        yield openai, anthropic


@pytest.fixture
def ledger(sqlite_url: str, tmp_path: Path) -> Iterator[Ledger]:
    led = Ledger(sqlite_url, journal_dir=tmp_path / "journal")
    yield led
    led.close()


def providers(openai: LoopbackLLM, anthropic: LoopbackLLM) -> list[Any]:
    return [
        make_provider("openai", api_key=KEY, base_url=openai.url),
        make_provider("anthropic", api_key=KEY, base_url=anthropic.url),
    ]


@pytest.fixture
def cascade(servers: tuple[LoopbackLLM, LoopbackLLM], ledger: Ledger) -> Iterator[Cascade]:
    with Client(providers=providers(*servers), ledger=ledger, strict=True) as client:
        yield Cascade(client, retry=RetryPolicy(), default_retry_after_s=15)


def rows(ledger: Ledger) -> list[dict[str, Any]]:
    assert ledger.flush(10)
    engine = make_engine(ledger.url)
    with engine.connect() as conn:
        found = [
            dict(r) for r in conn.execute(select(token_usage).order_by(token_usage.c.id)).mappings()
        ]
    engine.dispose()
    return found


def assert_fell_back(ledger: Ledger, error_type: str, http_status: int | None) -> None:
    first, second = rows(ledger)
    assert first["call_id"] == second["call_id"]
    assert (first["attempt"], second["attempt"]) == (1, 2)
    assert first["provider"] == "openai" and first["status"] == "error"
    assert (first["error_type"], first["http_status"]) == (error_type, http_status)
    assert second["provider"] == "anthropic" and second["status"] == "ok"
    for row in (first, second):
        assert row["requested_provider"] == "openai"
        assert row["requested_model"] == "gpt-4o-mini"


def test_openai_429_falls_back_to_anthropic(servers: Any, cascade: Cascade, ledger: Ledger) -> None:
    openai, anthropic = servers
    openai.queue(openai_error(429, **{"retry-after-ms": "1500"}))
    anthropic.queue(anthropic_ok(120, 0, 30))
    result = cascade.chat(MESSAGES, session_id="s1", actor_id="triage")
    assert (result.provider, result.model) == ("anthropic", "claude-haiku-4-5-20251001")
    assert [e.error_type for e in result.failed_attempts] == ["rate_limited"]
    assert result.failed_attempts[0].retry_after == 1.5
    assert_fell_back(ledger, "rate_limited", 429)


@pytest.mark.parametrize("status", [500, 502, 503])
def test_openai_5xx_falls_back_to_anthropic(
    status: int, servers: Any, cascade: Cascade, ledger: Ledger
) -> None:
    openai, anthropic = servers
    openai.queue(openai_error(status))
    anthropic.queue(anthropic_ok(120, 0, 30))
    assert cascade.chat(MESSAGES).provider == "anthropic"
    assert_fell_back(ledger, "server_error", status)


def test_connection_reset_on_openai_falls_back(
    servers: Any, cascade: Cascade, ledger: Ledger
) -> None:
    openai, anthropic = servers
    openai.queue(Reply(reset=True))
    anthropic.queue(anthropic_ok(120, 0, 30))
    assert cascade.chat(MESSAGES).provider == "anthropic"
    assert_fell_back(ledger, "transport", None)


def test_connection_refused_falls_back(servers: Any, ledger: Ledger, tmp_path: Path) -> None:
    _, anthropic = servers
    anthropic.queue(anthropic_ok(120, 0, 30))
    dead = make_provider("openai", api_key=KEY, base_url="http://127.0.0.1:9")  # discard port
    live = make_provider("anthropic", api_key=KEY, base_url=anthropic.url)
    with Client(providers=[dead, live], ledger=ledger, strict=True) as client:
        assert Cascade(client).chat(MESSAGES).provider == "anthropic"
    assert_fell_back(ledger, "transport", None)


def test_openai_401_raises_at_once_and_anthropic_is_never_called(
    servers: Any, cascade: Cascade, ledger: Ledger
) -> None:
    openai, anthropic = servers
    openai.queue(openai_error(401))
    with pytest.raises(ProviderClientError, match="upstream said 401") as raised:
        cascade.chat(MESSAGES)
    assert raised.value.http_status == 401
    assert anthropic.requests == []
    [row] = rows(ledger)
    assert (row["provider"], row["error_type"], row["http_status"]) == (
        "openai",
        "client_error",
        401,
    )


def test_all_providers_fail_gives_a_retryable_503(servers: Any, cascade: Cascade) -> None:
    openai, anthropic = servers
    openai.queue(openai_error(429, **{"retry-after": "3"}))
    anthropic.queue(anthropic_error(529, "overloaded_error", **{"retry-after": "7"}))
    with pytest.raises(AllProvidersFailed) as raised:
        cascade.chat(MESSAGES, locale="pt-BR")
    failure = raised.value
    assert [e.provider for e in failure.errors] == ["openai", "anthropic"]
    assert [e.error_type for e in failure.errors] == ["rate_limited", "server_error"]
    assert failure.retry_after == 7
    status, headers, body = failure.http_response()
    assert status == 503
    assert (b"retry-after", b"7") in headers
    payload = json.loads(body)
    assert payload["retry_after"] == 7 and "Tente novamente em 7 segundos" in payload["message"]
    assert "Traceback" not in body.decode()
    english = json.loads(failure.http_response("en-GB")[2])
    assert english["message"].startswith("All AI providers are busy")


def test_without_any_hint_retry_after_is_the_configured_default(
    servers: Any, cascade: Cascade
) -> None:
    openai, anthropic = servers
    openai.queue(openai_error(500))
    anthropic.queue(anthropic_error(500, "api_error"))
    with pytest.raises(AllProvidersFailed) as raised:
        cascade.chat(MESSAGES)
    assert raised.value.retry_after == 15


def test_a_mix_of_calls_charges_the_provider_that_answered(
    servers: Any, cascade: Cascade, ledger: Ledger
) -> None:
    openai, anthropic = servers
    billed = {"openai": Decimal(0), "anthropic": Decimal(0)}
    answered = []
    for i in range(24):
        usage = (400 + 10 * i, 256 if i % 2 else 0, 20 + i)
        if i % 3 == 0:  # every third call, OpenAI is rate limited
            openai.queue(openai_error(429))
            anthropic.queue(anthropic_ok(usage[0] - usage[1], usage[1], usage[2]))
            billed["anthropic"] += anthropic_bill(usage[0] - usage[1], usage[1], usage[2])
        else:
            openai.queue(openai_ok(*usage))
            billed["openai"] += openai_bill(*usage)
        answered.append(cascade.chat(MESSAGES, actor_id=f"agent-{i % 4}").provider)
    found = rows(ledger)
    ok = [r for r in found if r["status"] == "ok"]
    assert [r["provider"] for r in ok] == answered
    for provider, amount in billed.items():
        charged = sum(r["cost_usd"] for r in ok if r["provider"] == provider)
        assert charged == amount.quantize(Decimal("1e-10")), provider
    assert all(r["requested_provider"] == "openai" for r in found)
    assert len(found) == 24 + 8


def test_a_stream_falls_back_before_the_first_token(
    servers: Any, cascade: Cascade, ledger: Ledger
) -> None:
    openai, anthropic = servers
    openai.queue(openai_error(503))
    anthropic.queue(Reply.payload("anthropic_stream_sdk_fixture.sse"))
    with cascade.stream(MESSAGES) as stream:
        text = "".join(stream)
    assert text
    assert stream.result is not None and stream.result.provider == "anthropic"
    assert [e.http_status for e in stream.result.failed_attempts] == [503]
    first, second = rows(ledger)
    assert (first["status"], second["status"], second["streamed"]) == ("error", "ok", True)


def test_an_error_after_the_first_token_cannot_fall_back(
    servers: Any, cascade: Cascade, ledger: Ledger
) -> None:
    openai, anthropic = servers
    sse = "openai_stream_include_usage_real.sse"
    openai.queue(Reply.payload(sse, drop_after=20, chunk_size=64))
    received = []
    with pytest.raises(StreamInterrupted) as raised, cascade.stream(MESSAGES) as stream:
        for text in stream:
            received.append(text)
    assert received and raised.value.delivered
    assert anthropic.requests == []
    [row] = rows(ledger)
    assert row["error_type"] == "stream_interrupted"


def test_per_route_retry_honours_retry_after_before_moving_on(servers: Any, ledger: Ledger) -> None:
    openai, anthropic = servers
    openai.queue(openai_error(429, **{"retry-after-ms": "50"}), openai_ok(100, 0, 10))
    with Client(providers=providers(openai, anthropic), ledger=ledger, strict=True) as client:
        result = Cascade(client, retry=RetryPolicy(tries_per_route=2)).chat(MESSAGES)
    assert result.provider == "openai" and len(result.failed_attempts) == 1
    assert anthropic.requests == []
    assert [r["attempt"] for r in rows(ledger)] == [1, 2]


def test_the_deadline_bounds_the_whole_call(servers: Any, ledger: Ledger) -> None:
    openai, anthropic = servers
    openai.queue(openai_error(429, **{"retry-after": "5"}))
    policy = RetryPolicy(tries_per_route=3, max_retry_after_s=10, deadline_s=1.0)
    anthropic.queue(anthropic_ok(10, 0, 1))
    with Client(providers=providers(openai, anthropic), ledger=ledger, strict=True) as client:
        # A 5 s wait would overrun the 1 s deadline: move on to Anthropic at once.
        assert Cascade(client, retry=policy).chat(MESSAGES).provider == "anthropic"


def test_chains_of_any_length(servers: Any, ledger: Ledger) -> None:
    openai, anthropic = servers
    openai.queue(openai_error(502), openai_error(429))
    anthropic.queue(anthropic_ok(10, 0, 1))
    chain = [
        Route("openai", "gpt-4o-mini"),
        Route("openai", "gpt-4o"),
        Route("anthropic", "claude-haiku-4-5-20251001"),
    ]
    with Client(providers=providers(openai, anthropic), ledger=ledger, strict=True) as client:
        result = Cascade(client, chain).chat(MESSAGES)
    assert result.provider == "anthropic" and len(result.failed_attempts) == 2
    assert [r["attempt"] for r in rows(ledger)] == [1, 2, 3]


def test_async_cascade_falls_back_and_attributes(servers: Any, ledger: Ledger) -> None:
    openai, anthropic = servers
    openai.queue(openai_error(429))
    anthropic.queue(anthropic_ok(120, 0, 30))

    async def run() -> str:
        async with AsyncClient(
            providers=providers(openai, anthropic), ledger=ledger, strict=True
        ) as client:
            result = await AsyncCascade(client).chat(MESSAGES)
            return result.provider

    assert asyncio.run(run()) == "anthropic"
    assert_fell_back(ledger, "rate_limited", 429)


def test_async_stream_falls_back_before_the_first_token(servers: Any, ledger: Ledger) -> None:
    openai, anthropic = servers
    openai.queue(Reply(reset=True))
    anthropic.queue(Reply.payload("anthropic_stream_sdk_fixture.sse"))

    async def run() -> tuple[str, str | None]:
        async with AsyncClient(
            providers=providers(openai, anthropic), ledger=ledger, strict=True
        ) as client:
            async with await AsyncCascade(client).stream(MESSAGES) as stream:
                text = "".join([t async for t in stream])
            return text, stream.result.provider if stream.result else None

    text, provider = asyncio.run(run())
    assert text and provider == "anthropic"


def test_a_fallback_without_an_api_key_fails_when_the_cascade_is_built(
    servers: Any, ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    openai, anthropic = servers
    chain = [Route("openai", "gpt-4o-mini"), Route("mistral", "mistral-small-latest")]
    client = Client(providers=providers(openai, anthropic), ledger=ledger, strict=True)
    with pytest.raises(ProviderConfigurationError, match="mistral"):
        Cascade(client, chain)
    client.close()
    aclient = AsyncClient(providers=providers(openai, anthropic), ledger=ledger)
    with pytest.raises(ProviderConfigurationError, match="mistral"):
        AsyncCascade(aclient, chain)
    asyncio.run(aclient.aclose())
    assert openai.requests == []


def test_the_deadline_bounds_an_attempt_in_flight(servers: Any, ledger: Ledger) -> None:
    openai, anthropic = servers
    # OpenAI starts answering, then hangs far past the deadline.
    openai.queue(Reply(b'{"id": "chatcmpl-slow", "choices": []}', chunk_size=8, delay_s=5.0))
    anthropic.queue(anthropic_ok(10, 0, 1))
    policy = RetryPolicy(deadline_s=0.5)
    with Client(providers=providers(openai, anthropic), ledger=ledger, strict=True) as client:
        started = time.monotonic()
        with pytest.raises(AllProvidersFailed) as failed:
            Cascade(client, retry=policy).chat(MESSAGES)
        elapsed = time.monotonic() - started
    assert elapsed < 2.0  # not the 5 s the server hangs for
    assert [e.error_type for e in failed.value.errors] == ["timeout"]
    assert anthropic.requests == []  # no time was left for the fallback
    [row] = rows(ledger)
    assert row["error_type"] == "timeout"


def test_a_client_timeout_shorter_than_the_deadline_still_applies(
    servers: Any, ledger: Ledger
) -> None:
    openai, anthropic = servers
    openai.queue(Reply(b'{"id": "chatcmpl-slow", "choices": []}', chunk_size=8, delay_s=5.0))
    anthropic.queue(anthropic_ok(10, 0, 1))
    chain = [Route("openai", "gpt-4o-mini"), Route("anthropic", "claude-haiku-4-5-20251001")]
    with Client(
        providers=providers(openai, anthropic), ledger=ledger, strict=True, timeout=0.3
    ) as client:
        result = Cascade(client, chain, retry=RetryPolicy(deadline_s=3.0)).chat(MESSAGES)
    # The client's own 0.3 s timeout is below the deadline: it still applies.
    assert result.provider == "anthropic"
    assert [e.error_type for e in result.failed_attempts] == ["timeout"]
