"""Session and actor reach rows written from worker threads: ``ledger.bind`` and
``ledger.ContextThreadPoolExecutor``, next to the plain pool that loses them."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

import ledger
from tests.instrument.conftest import Rows
from tests.llm_loopback import LoopbackLLM, Reply

PAYLOAD = "openai_chat_cached_real.json"


@pytest.fixture
def client(loopback: LoopbackLLM, rows: Rows) -> Iterator[openai.OpenAI]:
    loopback.default = Reply.payload(PAYLOAD)
    base = loopback.url + "/v1"
    http = ledger.httpx_client(ledger=rows, providers={base: "openai"})
    with openai.OpenAI(api_key="sk-x", base_url=base, http_client=http, max_retries=0) as c:
        yield c


def _ask(client: openai.OpenAI, n: int) -> str:
    reply = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": f"task {n}"}]
    )
    return reply.id


def _attribution(rows: Rows) -> list[tuple[str | None, str | None]]:
    return [(r.session_id, r.actor_id) for r in rows.events]


def test_a_plain_pool_loses_the_context(client: openai.OpenAI, rows: Rows) -> None:
    # What the helpers are for: the documented failure they fix.
    with ledger.context(session_id="s-1", actor_id="planner"), ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda n: _ask(client, n), range(4)))
    assert _attribution(rows) == [(None, None)] * 4


def test_context_pool_map_and_submit_keep_attribution(client: openai.OpenAI, rows: Rows) -> None:
    with ledger.ContextThreadPoolExecutor(4) as pool:
        with ledger.context(session_id="s-1", actor_id="planner"):
            list(pool.map(lambda n: _ask(client, n), range(6)))
        with ledger.context(session_id="s-2", actor_id="critic"):
            futures = [pool.submit(_ask, client, n) for n in range(3)]
        # Captured at submit: leaving the block before the work runs changes nothing.
        for f in futures:
            f.result(timeout=60)
        pool.submit(_ask, client, 99).result(timeout=60)  # no context: none recorded
    got = sorted(_attribution(rows), key=str)
    assert got == sorted(
        [("s-1", "planner")] * 6 + [("s-2", "critic")] * 3 + [(None, None)], key=str
    )


def test_bind_carries_the_context_of_the_bind_call(client: openai.OpenAI, rows: Rows) -> None:
    with ledger.context(session_id="s-9", actor_id="reviewer"):
        work = ledger.bind(lambda n: _ask(client, n))
    # One bound function, run in many threads at once (a copied Context could not be).
    with ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(work, range(8)))
    assert len(ids) == 8
    assert _attribution(rows) == [("s-9", "reviewer")] * 8


def test_a_context_set_inside_the_worker_nests_over_the_bound_one(
    client: openai.OpenAI, rows: Rows
) -> None:
    def inner(n: int) -> str:
        with ledger.context(actor_id="sub-agent"):
            return _ask(client, n)

    with (
        ledger.context(session_id="s-3", actor_id="lead"),
        ledger.ContextThreadPoolExecutor(2) as p,
    ):
        p.submit(inner, 1).result(timeout=60)
    assert _attribution(rows) == [("s-3", "sub-agent")]


async def test_run_in_executor_with_the_context_pool_and_the_ways_that_already_work(
    client: openai.OpenAI, rows: Rows
) -> None:
    loop = asyncio.get_running_loop()
    with (
        ledger.ContextThreadPoolExecutor(2) as pool,
        ledger.context(session_id="s-a", actor_id="x"),
    ):
        await loop.run_in_executor(pool, _ask, client, 1)
        await asyncio.to_thread(_ask, client, 2)  # copies the context itself
        ctx = contextvars.copy_context()
        await loop.run_in_executor(None, ctx.run, _ask, client, 3)
        await loop.run_in_executor(None, _ask, client, 4)  # the default pool: lost
    assert _attribution(rows) == [("s-a", "x")] * 3 + [(None, None)]


def test_headers_carry_the_context_into_any_thread(client: openai.OpenAI, rows: Rows) -> None:
    def ask(n: int) -> None:
        client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": f"task {n}"}],
            extra_headers={"x-ledger-session-id": "s-h", "x-ledger-actor-id": "worker"},
        )

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(ask, range(2)))
    assert _attribution(rows) == [("s-h", "worker")] * 2
