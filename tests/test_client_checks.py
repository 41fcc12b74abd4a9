"""What the client refuses before sending, what it records as actually sent, and who it
blames for an OpenRouter error: review findings A, B and F, against a loopback server."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from ledger.attempt import Call, ChatOptions, Filing
from ledger.errors import RateLimited
from ledger.instrument import context
from tests.llm_loopback import LoopbackLLM, Reply, Rows
from tests.test_client import MESSAGES, client_for

OPENROUTER_OK = "openrouter_chat_anthropic_cache_read_write.json"


@pytest.mark.parametrize(
    ("options", "model"),
    [
        ({"session_id": "a\x00b"}, "gpt-4o-mini"),
        ({"actor_id": "\ud800"}, "gpt-4o-mini"),
        ({"locale": "pt\x00BR"}, "gpt-4o-mini"),
        ({"tags": {"note": float("nan")}}, "gpt-4o-mini"),
        ({"routing_order": "deepinfra"}, "gpt-4o-mini"),
        ({"paused": "yes"}, "gpt-4o-mini"),
        ({}, "m" * 300),
        ({}, ""),
        ({}, "gpt\x00mini"),
    ],
)
def test_a_call_whose_row_the_ledger_would_refuse_is_never_sent(
    server: LoopbackLLM, rows: Rows, options: dict[str, Any], model: str
) -> None:
    server.default = Reply.payload("openai_chat_cached_real.json")
    with client_for(server, rows, "openai") as client, pytest.raises(ValueError):
        client.chat(MESSAGES, model=model, **options)
    assert server.requests == []  # nothing paid for
    assert rows.events == []


def test_the_context_refuses_what_the_ledger_would_refuse() -> None:
    with pytest.raises(ValueError, match="NUL"), context(session_id="a\x00b"):
        pass
    with pytest.raises(ValueError, match="UTF-8"), context(actor_id="\ud800"):
        pass


def test_a_session_id_in_extra_body_is_the_key_recorded_and_order_warns(
    server: LoopbackLLM, rows: Rows, caplog: pytest.LogCaptureFixture
) -> None:
    server.queue(Reply.payload(OPENROUTER_OK))
    extra = {"session_id": "mine", "provider": {"order": ["deepinfra", "together"]}}
    with (
        client_for(server, rows, "openrouter") as client,
        caplog.at_level(logging.WARNING, logger="ledger.client"),
    ):
        client.chat(
            MESSAGES, model="anthropic/claude-sonnet-4.6", session_id="s-1", extra_body=extra
        )
    sent = server.requests[0].body
    assert sent["session_id"] == "mine"
    assert sent["provider"] == {"order": ["deepinfra", "together"]}
    assert rows.only.session_key == "mine"  # what was sent, not the key the client built
    assert rows.only.routing_order == "deepinfra,together"
    assert "sticky routing off" in caplog.text


def test_a_sort_object_in_extra_body_records_its_strategy(server: LoopbackLLM, rows: Rows) -> None:
    server.queue(Reply.payload(OPENROUTER_OK))
    extra = {"provider": {"sort": {"by": "throughput", "partition": "none"}}}
    with client_for(server, rows, "openrouter") as client:
        client.chat(
            MESSAGES, model="anthropic/claude-sonnet-4.6", session_id="s-1", extra_body=extra
        )
    assert server.requests[0].body["session_id"] == "ledger:s-1"
    assert rows.only.session_key == "ledger:s-1"
    assert rows.only.routing_sort == "throughput" and rows.only.routing_order is None


def test_an_unrecordable_session_id_in_extra_body_is_refused_before_sending(
    server: LoopbackLLM, rows: Rows
) -> None:
    server.default = Reply.payload(OPENROUTER_OK)
    with client_for(server, rows, "openrouter") as client:
        for bad in (
            {"session_id": 42},
            {"session_id": "k" * 300},
            {"provider": {"order": "deepinfra"}},
        ):
            with pytest.raises(ValueError):
                client.chat(MESSAGES, model="openai/gpt-4o", extra_body=bad)
    assert server.requests == [] and rows.events == []


def test_an_openrouter_error_naming_its_upstream_is_filed_against_it(
    server: LoopbackLLM, rows: Rows
) -> None:
    server.queue(
        Reply.payload("openrouter_error_429_upstream_real.json", status=429),
        Reply.payload("openrouter_error_429_free_limit_real.json", status=429),
    )
    with client_for(server, rows, "openrouter") as client:
        with pytest.raises(RateLimited) as named:
            client.chat(MESSAGES, model="google/gemini-2.0-flash-exp:free")
        with pytest.raises(RateLimited) as unnamed:
            client.chat(MESSAGES, model="google/gemini-2.0-flash-exp:free")
    assert named.value.upstream == "Google"
    assert [e.upstream for e in rows.events] == ["Google", None]
    assert [e.status for e in rows.events] == ["error", "error"]
    assert unnamed.value.upstream is None


def test_a_direct_provider_never_gets_an_upstream_from_its_error_body(
    server: LoopbackLLM, rows: Rows
) -> None:
    server.queue(Reply.payload("openrouter_error_429_upstream_real.json", status=429))
    with client_for(server, rows, "openai") as client, pytest.raises(RateLimited):
        client.chat(MESSAGES, model="gpt-4o-mini")
    assert rows.only.upstream is None


CACHED_SYSTEM = [
    {"type": "text", "text": "You review incident reports."},
    {"type": "text", "text": "Long shared context…", "cache_control": {"type": "ephemeral"}},
]


def test_anthropic_gets_content_blocks_as_blocks_so_prompt_caching_works(
    server: LoopbackLLM, rows: Rows
) -> None:
    server.queue(Reply.payload("anthropic_messages_cache_read_write_real.json"))
    user_blocks = [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]
    messages = [
        {"role": "system", "content": CACHED_SYSTEM},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": user_blocks},
    ]
    with client_for(server, rows, "anthropic") as client:
        client.chat(messages, model="claude-sonnet-4-5")
    body = server.requests[0].body
    assert body["system"] == [*CACHED_SYSTEM, {"type": "text", "text": "Be brief."}]
    assert body["messages"] == [{"role": "user", "content": user_blocks}]


def test_gemini_gets_the_text_of_content_blocks_as_parts(server: LoopbackLLM, rows: Rows) -> None:
    server.queue(Reply.payload("gemini_generatecontent_cached_thoughts_real.json"))
    messages = [
        {"role": "system", "content": CACHED_SYSTEM},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}],
        },
    ]
    with client_for(server, rows, "gemini") as client:
        client.chat(messages, model="gemini-2.5-flash")
    body = server.requests[0].body
    assert body["systemInstruction"] == {
        "parts": [{"text": "You review incident reports.\n\nLong shared context…"}]
    }
    assert body["contents"] == [{"role": "user", "parts": [{"text": "Hi"}, {"text": "!"}]}]


def test_the_typed_options_are_exactly_the_calls_fields() -> None:
    """``chat(**options)`` is typed by ChatOptions: it may not drift from what a Call holds."""
    fields = {f.name for f in dataclasses.fields(Call)} - {"messages"}
    assert set(ChatOptions.__annotations__) == fields


def test_an_unknown_option_is_refused_before_sending(server: LoopbackLLM, rows: Rows) -> None:
    with client_for(server, rows, "openai") as client, pytest.raises(TypeError, match="sesion"):
        client.chat(MESSAGES, model="gpt-4o-mini", **{"sesion_id": "s"})  # type: ignore[call-arg]
    assert server.requests == [] and rows.events == []


def test_a_filing_with_an_unrecordable_requested_model_is_never_sent(
    server: LoopbackLLM, rows: Rows
) -> None:
    filing = Filing("0b7e3a4c-1f7d-4a7e-9d1e-3f2b6c9a8e01", 1, "openai", "m\x00")
    with client_for(server, rows, "openai") as client, pytest.raises(ValueError):
        client.attempt(Call(MESSAGES), provider="openai", model="gpt-4o-mini", filing=filing)
    assert server.requests == [] and rows.events == []
