"""Session and agent context: follows threads and tasks, never leaks between them."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

import ledger
from ledger.instrument import current
from tests.instrument.conftest import Rows
from tests.llm_loopback import LoopbackLLM, Reply

PAYLOAD = "openai_chat_cached_real.json"


def test_nested_contexts_inherit_and_merge_tags() -> None:
    with ledger.context(session_id="s", tags={"app": "a", "env": "prod"}):
        with ledger.context(actor_id="planner", tags={"env": "dev"}) as inner:
            assert (inner.session_id, inner.actor_id) == ("s", "planner")
            assert inner.tags == {"app": "a", "env": "dev"}
        assert current().actor_id is None
    assert current().session_id is None


def test_a_context_the_ledger_could_not_record_fails_at_the_with() -> None:
    with pytest.raises(ValueError, match="session_id"), ledger.context(session_id="x" * 300):
        pass
    with pytest.raises(ValueError, match="tags"), ledger.context(tags={"bad": object()}):
        pass


def test_threads_sharing_one_client_each_record_their_own_context(
    loopback: LoopbackLLM, rows: Rows
) -> None:
    loopback.default = Reply.payload(PAYLOAD)
    base = loopback.url + "/v1"
    http = ledger.httpx_client(ledger=rows, providers={base: "openai"})
    client = openai.OpenAI(api_key="sk-x", base_url=base, http_client=http, max_retries=0)
    barrier = threading.Barrier(4)

    def agent(name: str) -> None:
        with ledger.context(session_id=f"s-{name}", actor_id=name):
            barrier.wait()
            for _ in range(5):
                client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}]
                )

    with ledger.context(session_id="parent"):
        threads = [threading.Thread(target=agent, args=(f"a{i}",)) for i in range(3)]
        threads.append(
            threading.Thread(
                target=lambda: (
                    barrier.wait(),
                    client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "x"}]
                    ),
                )
            )
        )
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    client.close()
    by_session: dict[str | None, set[str | None]] = {}
    for row in rows.events:
        by_session.setdefault(row.session_id, set()).add(row.actor_id)
    # A new thread starts with an empty context: the parent's session does not leak into it.
    assert by_session == {"s-a0": {"a0"}, "s-a1": {"a1"}, "s-a2": {"a2"}, None: {None}}
    assert len(rows.events) == 16


def test_plain_httpx_clients_are_metered_too(loopback: LoopbackLLM, rows: Rows) -> None:
    loopback.queue(Reply.payload(PAYLOAD))
    with ledger.httpx_client(library="httpx", ledger=rows) as http:
        assert isinstance(http, httpx.Client)
        response = http.post(
            loopback.url + "/v1/chat/completions",
            json={"model": "gpt-4o-mini", "messages": []},
            headers={"x-ledger-session-id": "raw"},
        )
    assert response.json()["usage"]["prompt_tokens"] == rows.only.input_tokens
    assert rows.only.provider == "openai_compatible" and rows.only.session_id == "raw"


async def test_async_plain_httpx_client_records_and_passes_bytes(
    loopback: LoopbackLLM, rows: Rows
) -> None:
    loopback.queue(Reply.payload("openrouter_stream_openai_o3.sse"))
    body = {"model": "openai/o3", "messages": [], "stream": True}
    url = loopback.url + "/api/v1/chat/completions"
    async with (
        ledger.async_httpx_client(library="httpx", ledger=rows) as http,
        http.stream("POST", url, json=body) as r,
    ):
        got = b"".join([chunk async for chunk in r.aiter_raw()])
    assert got.startswith(b": OPENROUTER PROCESSING")
    assert rows.only.provider == "openrouter" and rows.only.upstream == "OpenAI"
