"""``reconcile_openrouter`` against a loopback server replaying the real generation
payload, and against the simulator serving what it billed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from ledger import Client
from ledger.errors import ReconcileAuthError
from ledger.providers import make_provider
from ledger.reconcile.openrouter import (
    GenerationClient,
    ReconcileReport,
    Retry,
    reconcile_openrouter,
)
from ledger.schema import token_usage
from ledger.simulator import Simulator, VirtualClock, serve_in_thread
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from tests.analytics.builders import insert_rows, row
from tests.llm_loopback import LoopbackLLM, Reply

GEN_ID = "gen-1771967973-0hZ8J5kY7qLMOKbPx0u3"
FAST = Retry(attempts=3, base_s=0.01, max_s=0.05)


@pytest.fixture
def server() -> Iterator[LoopbackLLM]:
    with LoopbackLLM() as s:
        yield s


def _reconcile(url: str, base_url: str, retry: Retry = FAST, **kw: Any) -> ReconcileReport:
    async def run() -> ReconcileReport:
        engine = make_engine(url)
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                client = GenerationClient(
                    http, api_key="sk-or-test", base_url=base_url, retry=retry
                )
                return await reconcile_openrouter(engine, client, since=None, **kw)
        finally:
            engine.dispose()

    return asyncio.run(run())


def _rows(url: str) -> list[Any]:
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(token_usage).order_by(token_usage.c.id)).all()
    engine.dispose()
    return list(rows)


def _openrouter_row(**values: Any) -> dict[str, Any]:
    base = {
        "generation_id": GEN_ID,
        "model": "meta-llama/llama-4-scout-17b-16e-instruct",
        "input_tokens": 65,
        "output_tokens": 116,
        "cost_usd": Decimal("0.00003"),
        "cost_source": "computed",
        "streamed": True,
    }
    return row(0, **{**base, **values})


def test_the_billed_cost_is_stored_beside_the_estimate_once(
    server: LoopbackLLM, ledger_url: str
) -> None:
    insert_rows(ledger_url, [_openrouter_row()])
    server.default = Reply.payload("billing/openrouter_generation_real.json")
    report = _reconcile(ledger_url, server.url)
    assert (report.examined, report.billed, report.pending, report.failed) == (1, 1, 0, 0)
    assert report.drift_usd == Decimal("0.00000452")
    (sent,) = server.requests
    assert sent.path == f"/generation?id={GEN_ID}"
    assert sent.headers["authorization"] == "Bearer sk-or-test"
    (stored,) = _rows(ledger_url)
    assert stored.billed_cost_usd == Decimal("0.0000345200")
    assert stored.cost_usd == Decimal("0.0000300000") and stored.cost_source == "computed"
    assert stored.upstream == "DeepInfra"  # the stream had not named it
    assert stored.billing["native_tokens_completion"] == 98
    assert stored.billed_at is not None
    # A rerun asks for nothing and changes nothing.
    again = _reconcile(ledger_url, server.url)
    assert (again.examined, again.billed) == (0, 0) and len(server.requests) == 1
    assert _rows(ledger_url) == [stored]


def test_an_upstream_already_known_is_kept(server: LoopbackLLM, sqlite_url: str) -> None:
    insert_rows(sqlite_url, [_openrouter_row(upstream="Groq")])
    server.default = Reply.payload("billing/openrouter_generation_real.json")
    _reconcile(sqlite_url, server.url)
    assert _rows(sqlite_url)[0].upstream == "Groq"


def test_a_generation_not_found_yet_stays_pending_and_is_billed_later(
    server: LoopbackLLM, sqlite_url: str
) -> None:
    insert_rows(sqlite_url, [_openrouter_row()])
    server.queue(Reply(b'{"error":{"code":404,"message":"Generation not found"}}', status=404))
    first = _reconcile(sqlite_url, server.url)
    assert (first.billed, first.pending, first.failed) == (0, 1, 0)
    assert _rows(sqlite_url)[0].billed_at is None
    server.default = Reply.payload("billing/openrouter_generation_real.json")
    later = _reconcile(sqlite_url, server.url)
    assert (later.billed, later.pending) == (1, 0)


def test_429_is_retried_after_its_retry_after(server: LoopbackLLM, sqlite_url: str) -> None:
    insert_rows(sqlite_url, [_openrouter_row()])
    server.queue(
        Reply(
            b'{"error":{"code":429,"message":"Rate limit exceeded"}}',
            status=429,
            headers={"retry-after": "0"},
        ),
        Reply(b"{}", status=503),
    )
    server.default = Reply.payload("billing/openrouter_generation_real.json")
    report = _reconcile(sqlite_url, server.url)
    assert report.billed == 1 and len(server.requests) == 3


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_stops_the_run_and_leaves_rows_unreconciled(
    server: LoopbackLLM, sqlite_url: str, status: int
) -> None:
    insert_rows(sqlite_url, [_openrouter_row()])
    server.default = Reply(b'{"error":{"message":"No auth credentials found"}}', status=status)
    with pytest.raises(ReconcileAuthError, match=f"HTTP {status}"):
        _reconcile(sqlite_url, server.url)
    assert _rows(sqlite_url)[0].billed_at is None


def test_an_endpoint_that_keeps_failing_is_reported_not_stored(
    server: LoopbackLLM, sqlite_url: str
) -> None:
    insert_rows(sqlite_url, [_openrouter_row()])
    server.default = Reply(b"{}", status=500)
    report = _reconcile(sqlite_url, server.url)
    assert (report.billed, report.failed) == (0, 1)
    assert "still failing after 3 tries (HTTP 500)" in report.errors[0]
    assert _rows(sqlite_url)[0].billed_cost_usd is None


def test_the_simulator_bills_what_it_served_with_lag_and_discrepancies(
    ledger_url: str, tmp_path: Path
) -> None:
    sim = Simulator(clock=VirtualClock(), seed=7)
    sim.generations.lag_s = 3600.0  # OpenRouter's stats lag the completion
    sim.generations.discrepancy_rate = 0.3
    with serve_in_thread(sim) as url:
        ledger = Ledger(ledger_url, journal_dir=tmp_path / "journal")
        provider = make_provider("openrouter", api_key="sk-or-test", base_url=f"{url}/api/v1")
        with Client(providers=[provider], ledger=ledger, default_provider="openrouter") as client:
            for i in range(20):
                client.chat([{"role": "user", "content": f"q{i}"}], model="qwen/qwen3-coder")
        assert ledger.flush(30)
        ledger.close()
        lagging = _reconcile(ledger_url, f"{url}/api/v1")
        assert (lagging.examined, lagging.billed, lagging.pending) == (20, 0, 20)
        sim.generations.lag_s = 0.0
        report = _reconcile(ledger_url, f"{url}/api/v1", concurrency=4)
    assert (report.billed, report.pending, report.failed) == (20, 0, 0)
    rows = _rows(ledger_url)
    assert all(r.cost_source == "provider" for r in rows)
    off = [r for r in rows if r.billed_cost_usd != r.cost_usd]
    assert 0 < len(off) < 20  # the discrepancies, and only them
    for r in off:
        assert r.billed_cost_usd == (r.cost_usd * Decimal("1.05")).quantize(Decimal("1e-10"))
    assert report.drift_usd == sum(r.billed_cost_usd - r.cost_usd for r in rows)
