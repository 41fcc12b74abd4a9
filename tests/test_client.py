"""The client against a real loopback HTTP server serving real provider payloads."""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ledger import pricing
from ledger.attempt import Call, Filing
from ledger.client import Client
from ledger.errors import (
    MalformedResponse,
    ProviderClientError,
    ProviderConfigurationError,
    ProviderError,
    ProviderServerError,
    ProviderTimeout,
    ProviderTransportError,
    RateLimited,
)
from ledger.events import UsageEvent, to_row
from ledger.providers import PROVIDERS, ChatRequest, make_provider
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from tests.llm_loopback import LoopbackLLM, Reply, Rows

KEY = "sk-test-abcdefghijklmnop1234"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


def client_for(server: LoopbackLLM, rows: Any, *names: str, **kw: Any) -> Client:
    providers = [make_provider(n, api_key=KEY, base_url=server.url) for n in names]
    return Client(providers=providers, ledger=rows, strict=True, default_provider=names[0], **kw)


def test_openrouter_call_sends_the_sticky_key_and_records_who_served_it(
    server: LoopbackLLM, ledger_url: str, tmp_path: Path
) -> None:
    server.queue(Reply.payload("openrouter_chat_anthropic_cache_read_write.json"))
    ledger = Ledger(ledger_url, journal_dir=tmp_path / "journal")
    with client_for(server, ledger, "openrouter") as client:
        result = client.chat(
            MESSAGES,
            model="anthropic/claude-sonnet-4.6",
            session_id="s-1",
            actor_id="planner",
            routing_sort="price",
            tags={"app": "demo"},
            locale="pt-BR",
        )
    assert ledger.flush(10)
    ledger.close()
    sent = server.requests[0]
    assert sent.path == "/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body["session_id"] == "ledger:s-1:planner"
    assert sent.body["provider"] == {"sort": "price"}
    assert result.upstream == "Anthropic"
    assert result.cost_usd == Decimal("0.00219855") and result.cost_source == "provider"
    engine = make_engine(ledger_url)
    with engine.connect() as conn:
        row = conn.execute(select(token_usage)).mappings().one()
    engine.dispose()
    assert row["session_key"] == "ledger:s-1:planner"
    assert row["upstream"] == "Anthropic"
    assert row["generation_id"] == "gen-1773011158-Ce1hHC4Gr81WIraIsgAJ"
    assert row["model"] == "anthropic/claude-4.6-sonnet-20260217"
    assert row["requested_model"] == "anthropic/claude-sonnet-4.6"
    assert (row["input_tokens"], row["cache_read_tokens"], row["cache_write_tokens"]) == (
        3329,
        3211,
        115,
    )
    assert row["cost_usd"] == Decimal("0.0021985500") and row["cost_source"] == "provider"
    assert row["routing_sort"] == "price" and row["status"] == "ok"
    assert row["tags"] == {"app": "demo"} and row["locale"] == "pt-BR"


NON_STICKY = {
    "openai": ("openai_chat_cached_real.json", "/chat/completions", "authorization"),
    "azure_openai": (
        "openai_chat_doc_example.json",
        "/openai/deployments/my-gpt/chat/completions?api-version=2024-10-21",
        "api-key",
    ),
    "anthropic": ("anthropic_messages_cache_read_write_real.json", "/v1/messages", "x-api-key"),
    "gemini": (
        "gemini_generatecontent_cached_thoughts_real.json",
        "/models/my-gpt:generateContent",
        "x-goog-api-key",
    ),
    "mistral": ("mistral_chat_cached_real.json", "/chat/completions", "authorization"),
    "groq": ("groq_chat_cached_reasoning_real.json", "/chat/completions", "authorization"),
    "deepseek": (
        "deepseek_chat_cache_hit_reasoning_real.json",
        "/chat/completions",
        "authorization",
    ),
    "openai_compatible": ("openai_chat_doc_example.json", "/chat/completions", "authorization"),
}


@pytest.mark.parametrize("name", sorted(NON_STICKY))
def test_providers_without_sticky_sessions_get_no_key_and_record_none(
    server: LoopbackLLM, rows: Rows, name: str
) -> None:
    payload, path, auth = NON_STICKY[name]
    server.queue(Reply.payload(payload))
    with client_for(server, rows, name) as client:
        result = client.chat(
            MESSAGES, model="my-gpt", session_id="s-1", actor_id="a", routing_order=["x"]
        )
    sent = server.requests[0]
    assert sent.path == path
    assert KEY in sent.headers[auth]
    assert "session_id" not in sent.body and "provider" not in sent.body
    assert rows.only.session_key is None and rows.only.routing_order is None
    assert rows.only.session_id == "s-1" and rows.only.provider == name
    assert result.content and result.usage is not None
    assert rows.only.input_tokens == result.usage.input_tokens > 0


def test_anthropic_request_moves_system_prompt_and_sets_version(
    server: LoopbackLLM, rows: Rows
) -> None:
    server.queue(Reply.payload("anthropic_messages_sdk_snapshot.json"))
    with client_for(server, rows, "anthropic") as client:
        client.chat(MESSAGES, model="claude-sonnet-4-5")
    body = server.requests[0].body
    assert body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": "Hi"}]
    assert body["max_tokens"] == 1024
    assert server.requests[0].headers["anthropic-version"] == "2023-06-01"


def test_cost_is_computed_from_bundled_prices_when_the_provider_reports_none(
    server: LoopbackLLM, rows: Rows
) -> None:
    server.queue(Reply.payload("anthropic_messages_cache_read_write_real.json"))
    with client_for(server, rows, "anthropic") as client:
        result = client.chat(MESSAGES, model="claude-sonnet-4-5")
    # Sonnet 4.5: $3/M input, $0.30/M cache read, $3.75/M cache write, $15/M output.
    expected = (
        Decimal(3) * 3 + Decimal(1111) * Decimal("0.3") + Decimal(418) * Decimal("3.75") + 33 * 15
    ) / 1_000_000
    assert result.cost_usd == expected
    assert rows.only.cost_source == "computed" and isinstance(rows.only.cost_usd, Decimal)


JSON_HEADERS = {"content-type": "application/json"}


def test_unpriced_model_records_null_cost_and_logs_once(
    server: LoopbackLLM,
    rows: Rows,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A local model no price table knows, served on an endpoint that names no provider
    # (a model name like gpt-5.4 would be priced by inference from its name). Start
    # from a process that has warned about nothing.
    monkeypatch.setattr(pricing, "_warned", set())
    body = json.loads(Reply.payload("openai_chat_doc_example.json").body)
    body["model"] = "local-llama-unpriced"
    server.default = Reply(body=json.dumps(body).encode(), headers=JSON_HEADERS)
    with caplog.at_level(logging.WARNING), client_for(server, rows, "openai_compatible") as client:
        for _ in range(3):
            client.chat(MESSAGES, model="local-llama-unpriced")
    assert [e.cost_usd for e in rows.events] == [None, None, None]
    assert [e.cost_source for e in rows.events] == [None, None, None]
    unknown = [r for r in caplog.records if "is unknown" in r.getMessage()]
    assert len(unknown) == 1


def test_an_unpriced_served_model_is_never_priced_as_the_model_asked_for(
    server: LoopbackLLM, rows: Rows
) -> None:
    # Asked for a free model; OpenRouter served x-ai/grok-4 (no price in genai-prices,
    # no usage.cost in this capture). Pricing the free model asked for recorded a
    # computed $0 for a paid call; the cost is unknown.
    server.queue(Reply.payload("openrouter_chat_xai_cached_no_cost.json"))
    with client_for(server, rows, "openrouter") as client:
        result = client.chat(MESSAGES, model="google/gemini-2.0-flash-exp:free")
    assert rows.only.model == "x-ai/grok-4" and rows.only.input_tokens == 687
    assert result.cost_usd is None
    assert (rows.only.cost_usd, rows.only.cost_source) == (None, None)


def test_the_modality_split_is_recorded_and_audio_priced_at_its_rates(
    server: LoopbackLLM, ledger_url: str, tmp_path: Path
) -> None:
    server.queue(Reply.payload("gemini_generatecontent_cached_thoughts_real.json"))
    ledger = Ledger(ledger_url, journal_dir=tmp_path / "journal")
    with client_for(server, ledger, "gemini") as client:
        result = client.chat(MESSAGES, model="gemini-2.5-flash")
    assert ledger.flush(10)
    ledger.close()
    engine = make_engine(ledger_url)
    with engine.connect() as conn:
        row = conn.execute(select(token_usage)).one()
    engine.dispose()
    assert row.usage_details == {
        "input": {"text": 16, "video": 15780, "audio": 1917},
        "cache_read": {"audio": 1881, "text": 15, "video": 15483},
    }
    # Audio at $1/M (36 uncached) and $0.10/M (1881 cached), the rest at text rates
    # (tests/test_pricing.py has the whole hand computation).
    assert (row.cost_usd, row.cost_source) == (Decimal("0.00300094"), "computed")
    assert result.cost_usd == Decimal("0.00300094")


def test_provider_order_is_sent_recorded_and_warned_about(
    server: LoopbackLLM, rows: Rows, caplog: pytest.LogCaptureFixture
) -> None:
    server.queue(Reply.payload("openrouter_chat_doc_example.json"))
    with caplog.at_level(logging.WARNING), client_for(server, rows, "openrouter") as client:
        client.chat(
            MESSAGES,
            model="openai/gpt-4o",
            session_id="s",
            routing_sort="latency",
            routing_order=["openai", "azure"],
        )
    assert server.requests[0].body["provider"] == {"sort": "latency", "order": ["openai", "azure"]}
    assert server.requests[0].body["session_id"] == "ledger:s"
    assert rows.only.routing_order == "openai,azure" and rows.only.routing_sort == "latency"
    assert any("sticky routing off" in r.getMessage() for r in caplog.records)


def test_session_prefix_is_configurable(server: LoopbackLLM, rows: Rows) -> None:
    server.queue(Reply.payload("openrouter_chat_doc_example.json"))
    with client_for(server, rows, "openrouter", session_prefix="billing-app") as client:
        client.chat(MESSAGES, model="openai/gpt-4o", session_id="s9", actor_id="agent")
    assert server.requests[0].body["session_id"] == "billing-app:s9:agent"
    assert rows.only.session_key == "billing-app:s9:agent"


def test_connections_are_reused_across_calls(server: LoopbackLLM, rows: Rows) -> None:
    server.default = Reply.payload("openai_chat_doc_example.json")
    with client_for(server, rows, "openai") as client:
        for _ in range(5):
            client.chat(MESSAGES, model="gpt-4o")
    assert server.connections == 1 and len(rows.events) == 5


def test_attempt_files_the_row_under_the_callers_call_id(server: LoopbackLLM, rows: Rows) -> None:
    server.queue(Reply.payload("anthropic_messages_sdk_snapshot.json"))
    call_id = "0b7e3a4c-1f7d-4a7e-9d1e-3f2b6c9a8e01"
    with client_for(server, rows, "anthropic") as client:
        client.attempt(
            Call(messages=MESSAGES),
            provider="anthropic",
            model="claude-haiku",
            filing=Filing(call_id, 2, requested_provider="openai", requested_model="gpt-4o-mini"),
        )
    event = rows.only
    assert (event.call_id, event.attempt) == (call_id, 2)
    assert (event.requested_provider, event.requested_model) == ("openai", "gpt-4o-mini")
    assert event.provider == "anthropic"


@pytest.mark.parametrize(
    ("reply", "exc_type", "error_type", "transient"),
    [
        (
            Reply.payload("openrouter_error_429_doc.json", status=429),
            RateLimited,
            "rate_limited",
            True,
        ),
        (
            Reply.payload("anthropic_error_529_overloaded_real.json", status=529),
            ProviderServerError,
            "server_error",
            True,
        ),
        (
            Reply.payload("openrouter_error_502_doc.json", status=502),
            ProviderServerError,
            "server_error",
            True,
        ),
        (
            Reply.payload("groq_error_400_tool_use_failed_real.json", status=400),
            ProviderClientError,
            "client_error",
            False,
        ),
        (
            Reply(b'{"error": {"message": "bad key"}}', status=401),
            ProviderClientError,
            "client_error",
            False,
        ),
    ],
)
def test_http_errors_are_typed_classified_and_recorded(
    server: LoopbackLLM,
    rows: Rows,
    reply: Reply,
    exc_type: type[ProviderError],
    error_type: str,
    transient: bool,
) -> None:
    server.queue(reply)
    with client_for(server, rows, "openrouter") as client, pytest.raises(exc_type) as info:
        client.chat(MESSAGES, model="m", session_id="s")
    exc = info.value
    assert exc.error_type == error_type and exc.transient is transient
    assert exc.http_status == reply.status and exc.event is rows.only
    assert rows.only.status == "error" and rows.only.error_type == error_type
    assert rows.only.http_status == reply.status and rows.only.cost_usd is None


def test_retry_after_is_carried_on_the_exception(server: LoopbackLLM, rows: Rows) -> None:
    server.queue(
        Reply.payload(
            "openrouter_error_429_doc.json", status=429, headers={"retry-after-ms": "1500"}
        ),
        Reply.payload("openrouter_error_429_capacity_doc.json", status=429),
    )
    with client_for(server, rows, "openrouter") as client:
        with pytest.raises(RateLimited) as first:
            client.chat(MESSAGES, model="m")
        with pytest.raises(RateLimited) as second:
            client.chat(MESSAGES, model="m")
    assert first.value.retry_after == 1.5
    assert second.value.retry_after == 40


def test_api_keys_never_reach_messages_rows_or_logs(
    server: LoopbackLLM, rows: Rows, caplog: pytest.LogCaptureFixture
) -> None:
    echo = f'{{"error": {{"message": "Incorrect API key provided: {KEY}"}}}}'.encode()
    server.queue(Reply(echo, status=401))
    with caplog.at_level(logging.DEBUG), client_for(server, rows, "openai") as client:
        with pytest.raises(ProviderClientError) as info:
            client.chat(MESSAGES, model="gpt-4o")
        assert KEY not in repr(client.provider("openai"))
    assert KEY not in str(info.value)
    assert KEY not in repr(to_row(rows.only)) and "Hi" not in repr(to_row(rows.only))
    assert KEY not in caplog.text


def test_unreachable_provider_is_a_transport_error_with_a_row(rows: Rows) -> None:
    provider = make_provider("openai", api_key=KEY, base_url="http://127.0.0.1:9")
    with (
        Client(providers=[provider], ledger=rows, strict=True) as client,
        pytest.raises(ProviderTransportError) as info,
    ):
        client.chat(MESSAGES, model="gpt-4o")
    assert info.value.transient and info.value.error_type == "transport"
    assert rows.only.error_type == "transport" and rows.only.http_status is None


def test_slow_provider_times_out_with_a_row(server: LoopbackLLM, rows: Rows) -> None:
    server.queue(
        Reply.payload("openai_stream_include_usage_real.sse", delay_s=0.5, chunk_size=4000)
    )
    with (
        client_for(server, rows, "openai", timeout=0.2) as client,
        pytest.raises(ProviderTimeout),
    ):
        client.chat(MESSAGES, model="gpt-4o")
    assert rows.only.error_type == "timeout"


@pytest.mark.parametrize(
    "body",
    [
        b"<html>502 Bad Gateway</html>",
        b'{"id": "chatcmpl-1", "choices": [',
        b"\xff\xfe\x00garbage",
        b"",
    ],
)
def test_unusable_success_bodies_raise_malformed_response_with_a_row(
    server: LoopbackLLM, rows: Rows, body: bytes
) -> None:
    server.queue(Reply(body))
    with client_for(server, rows, "openai") as client, pytest.raises(MalformedResponse) as info:
        client.chat(MESSAGES, model="gpt-4o")
    assert info.value.transient
    assert rows.only.status == "error" and rows.only.http_status == 200


def test_missing_usage_returns_content_and_records_unknown_cost(
    server: LoopbackLLM, rows: Rows
) -> None:
    server.queue(
        Reply(b'{"id": "c1", "model": "gpt-4o", "choices": [{"message": {"content": "yo"}}]}')
    )
    with client_for(server, rows, "openai") as client:
        result = client.chat(MESSAGES, model="gpt-4o")
    assert result.content == "yo" and result.usage is None
    assert rows.only.status == "ok" and rows.only.input_tokens == 0 and rows.only.cost_usd is None
    # The 0 is not a count: the row says so, and no rate reads it as one.
    assert rows.only.usage_reported is False
    assert "no usage in response" in result.problems


def test_absurd_counts_are_clamped_huge_ones_kept_oversized_strings_cut_not_refused(
    server: LoopbackLLM, rows: Rows
) -> None:
    body = (
        '{"id": "'
        + "g" * 500
        + '", "model": "m\\u0000'
        + "x" * 400
        + '", "provider": "'
        + "u" * 300
        + '", "choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": 99999999999,'
        ' "completion_tokens": -5, "prompt_tokens_details": {"cached_tokens": 1e400}}}'
    ).encode()
    server.queue(Reply(body))
    with client_for(server, rows, "openrouter") as client:
        result = client.chat(MESSAGES, model="m")
    event = rows.only
    # 1e11 prompt tokens fit a bigint: kept as reported, never clamped to 2**31 - 1.
    assert event.input_tokens == 99_999_999_999 and event.output_tokens == 0
    assert len(event.generation_id or "") == 128 and len(event.model or "") == 256
    assert len(event.upstream or "") == 128 and "\x00" not in (event.model or "")
    assert result.problems


def test_cache_counts_above_input_are_lowered_to_input(server: LoopbackLLM, rows: Rows) -> None:
    body = (
        b'{"id": "c", "model": "m", "choices": [{"message": {"content": "ok"}}], "usage":'
        b' {"prompt_tokens": 10, "completion_tokens": 1,'
        b' "prompt_tokens_details": {"cached_tokens": 50}}}'
    )
    server.queue(Reply(body))
    with client_for(server, rows, "openai") as client:
        client.chat(MESSAGES, model="gpt-4o")
    assert rows.only.cache_read_tokens == 10


def test_choice_level_error_in_a_200_body_raises_instead_of_reporting_success(
    server: LoopbackLLM, rows: Rows
) -> None:
    server.queue(Reply.payload("openrouter_chat_choice_error_doc_fragment.json"))
    with client_for(server, rows, "openrouter") as client, pytest.raises(ProviderServerError):
        client.chat(MESSAGES, model="m")
    assert rows.only.status == "error" and rows.only.http_status == 200


def test_ledger_failure_never_breaks_the_call_outside_strict_mode(
    server: LoopbackLLM, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def record(self, event: UsageEvent) -> str:
            raise OSError("disk full")

    server.queue(Reply.payload("openai_chat_doc_example.json"))
    provider = make_provider("openai", api_key=KEY, base_url=server.url)
    with caplog.at_level(logging.ERROR), Client(providers=[provider], ledger=Broken()) as client:
        result = client.chat(MESSAGES, model="gpt-4o")
    assert result.content
    assert "could not record" in caplog.text


def test_caller_bugs_fail_before_anything_is_sent(server: LoopbackLLM, rows: Rows) -> None:
    with client_for(server, rows, "openai") as client:
        with pytest.raises(ValueError, match="session_id"):
            client.chat(MESSAGES, model="gpt-4o", session_id="s" * 300)
        with pytest.raises(ValueError, match="tags"):
            client.chat(MESSAGES, model="gpt-4o", tags={"when": object()})
    assert server.requests == [] and rows.events == []


def test_every_provider_is_registered() -> None:
    assert set(PROVIDERS) == {
        "openai",
        "azure_openai",
        "anthropic",
        "openrouter",
        "gemini",
        "mistral",
        "groq",
        "deepseek",
        "openai_compatible",
    }


def test_default_keys_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROQ_API_KEY", "gsk_from_env_123456789")
    request = make_provider("groq").build_request(ChatRequest(model="m", messages=[]))
    assert request.headers["authorization"] == "Bearer gsk_from_env_123456789"


def test_a_provider_without_its_key_fails_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ProviderConfigurationError, match="OPENAI_API_KEY"):
        make_provider("openai")
