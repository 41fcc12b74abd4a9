from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import select

from ledger.resilience.cache import ResponseCache
from ledger.resilience.recording import AsyncCachedCall, CachedCall, Turn
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger


@pytest.fixture
def ledger(ledger_url: str) -> Iterator[Ledger]:
    with Ledger(ledger_url) as led:
        yield led


def rows(ledger: Ledger) -> list[Any]:
    assert ledger.flush(10)
    engine = make_engine(ledger.url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(select(token_usage).order_by(token_usage.c.id)))
    finally:
        engine.dispose()


def answer(turn: Turn) -> dict[str, Any]:
    # What a client result looks like to the cache: content + who answered.
    return {
        "content": f"about {turn.text}",
        "provider": "openrouter",
        "model": "openai/gpt-4o-mini",
        "upstream": "Azure",
        "cost_usd": str(Decimal("0.0012")),
    }


def turn(**changes: Any) -> Turn:
    base: dict[str, Any] = {
        "text": "Explain sticky routing",
        "model": "openai/gpt-4o-mini",
        "requested_provider": "openrouter",
        "locale": "en",
        "session_id": "s-1",
        "actor_id": "planner",
        "tags": {"app": "demo"},
    }
    return Turn(**(base | changes))


def test_a_hit_writes_one_free_row_crediting_the_original_upstream(ledger: Ledger) -> None:
    calls: list[Turn] = []
    cached = CachedCall(lambda t: calls.append(t) or answer(t), ResponseCache(), ledger)
    first = cached(turn())
    second = cached(turn(session_id="s-2", actor_id="critic", tags={"app": "other"}))
    assert first == second and len(calls) == 1
    [row] = rows(ledger)  # the miss's attempt rows are the client's to write
    assert row.attempt == 0 and row.response_cache_hit and row.status == "ok"
    assert row.cost_usd is None and row.cost_source is None
    assert (row.input_tokens, row.output_tokens) == (0, 0)
    assert (row.session_id, row.actor_id, row.tags) == ("s-2", "critic", {"app": "other"})
    assert (row.requested_provider, row.requested_model, row.locale) == (
        "openrouter",
        "openai/gpt-4o-mini",
        "en",
    )
    assert (row.provider, row.model, row.upstream) == ("openrouter", "openai/gpt-4o-mini", "Azure")
    assert row.session_key is None and row.latency_ms >= 0


def test_a_paused_turn_is_neither_served_nor_stored(ledger: Ledger) -> None:
    calls: list[Turn] = []
    cached = CachedCall(lambda t: calls.append(t) or answer(t), ResponseCache(), ledger)
    cached(turn())
    cached(turn(paused=True))
    cached(turn(paused=True))
    assert len(calls) == 3
    assert rows(ledger) == []


async def test_concurrent_async_waiters_each_get_a_hit_row(ledger: Ledger) -> None:
    calls = 0

    async def slow(t: Turn) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.05)
        return answer(t)

    cached = AsyncCachedCall(slow, ResponseCache(), ledger)
    results = await asyncio.gather(*(cached(turn(session_id=f"s-{i}")) for i in range(8)))
    assert calls == 1 and len({r["content"] for r in results}) == 1
    hit_rows = rows(ledger)
    assert len(hit_rows) == 7
    assert all(r.attempt == 0 and r.response_cache_hit for r in hit_rows)


def test_a_ledger_failure_never_breaks_the_answer(
    ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    ledger.close()  # record() now raises RuntimeError
    cached = CachedCall(answer, ResponseCache(), ledger)
    cached(turn())
    assert cached(turn())["content"] == "about Explain sticky routing"
    assert "could not be recorded" in caplog.text
    assert "Explain sticky routing" not in caplog.text
