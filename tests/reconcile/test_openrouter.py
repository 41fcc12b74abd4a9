"""``reconcile_openrouter`` against a loopback server replaying the real generation
payload, and against the simulator serving what it billed."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
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
from ledger.reconcile.bounds import Deadline
from ledger.reconcile.openrouter import (
    MAX_GENERATION_BYTES,
    GenerationClient,
    Plausibility,
    ReconcileReport,
    Retry,
    reconcile_openrouter,
)
from ledger.schema import token_usage
from ledger.simulator import Simulator, VirtualClock, serve_in_thread
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from tests.analytics.builders import at, insert_rows, row
from tests.llm_loopback import PAYLOADS, LoopbackLLM, Reply

GEN_ID = "gen-1771967973-0hZ8J5kY7qLMOKbPx0u3"
FAST = Retry(attempts=3, base_s=0.01, max_s=0.05)


@pytest.fixture
def server() -> Iterator[LoopbackLLM]:
    with LoopbackLLM() as s:
        yield s


def _reconcile(
    url: str, base_url: str, retry: Retry = FAST, timeout: float = 10, **kw: Any
) -> ReconcileReport:
    if kw.pop("max_ratio_off", False):  # the id check alone, whatever the figures
        kw["plausibility"] = Plausibility(max_ratio=None)

    async def run() -> ReconcileReport:
        engine = make_engine(url)
        try:
            async with httpx.AsyncClient(timeout=timeout) as http:
                client = GenerationClient(
                    http, api_key="sk-or-test", base_url=base_url, retry=retry, timeout=timeout
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
    # a call of a moment ago: OpenRouter's stats lag it (an hour-old one would be unknown)
    insert_rows(sqlite_url, [_openrouter_row(started_at=dt.datetime.now(dt.UTC))])
    server.queue(Reply(b'{"error":{"code":404,"message":"Generation not found"}}', status=404))
    first = _reconcile(sqlite_url, server.url)
    assert (first.billed, first.pending, first.unknown, first.failed) == (0, 1, 0, 0)
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


def _generation(generation_id: str = GEN_ID, total_cost: str = "0.00003452", **extra: Any) -> Reply:
    """The real payload answering for ``generation_id`` with ``total_cost`` (JSON number)."""
    data = json.loads((PAYLOADS / "billing" / "openrouter_generation_real.json").read_text())
    data["data"].update(id=generation_id, **extra)
    body = json.dumps(data).replace("3.452e-05", total_cost).encode()
    assert total_cost in body.decode()
    return Reply(body, headers={"content-type": "application/json"})


def test_an_answer_for_another_generation_is_a_failure_never_a_bill(
    server: LoopbackLLM, ledger_url: str
) -> None:
    # The hardening review's server: every id answered with someone else's $99.50.
    insert_rows(
        ledger_url,
        [_openrouter_row(generation_id=f"gen-{i}", cost_usd=Decimal("0.0008")) for i in range(40)],
    )
    server.default = _generation("gen-someone-else", "99.5")
    report = _reconcile(ledger_url, server.url, max_ratio_off=True)
    assert (report.examined, report.billed, report.failed) == (40, 0, 40)
    assert report.billed_usd == 0 and not report.complete
    assert "the answer is for 'gen-someone-else'; its bill not stored" in report.errors[0]
    assert len(report.errors) == 20  # named up to 20, counted whole
    assert all(r.billed_at is None and r.billed_cost_usd is None for r in _rows(ledger_url))


def test_an_answer_naming_no_generation_is_not_stored(server: LoopbackLLM, sqlite_url: str) -> None:
    insert_rows(sqlite_url, [_openrouter_row()])
    server.default = Reply(b'{"data": {"total_cost": 0.00003452}}')
    report = _reconcile(sqlite_url, server.url)
    assert report.failed == 1 and "the answer is for no generation id" in report.errors[0]
    assert _rows(sqlite_url)[0].billed_at is None


@pytest.mark.parametrize(
    ("estimate", "billed", "implausible"),
    [
        ("0.0008", "99.5", True),  # the review's case: 124,000x
        ("0.0008", "0.0801", True),  # just above 100x, and above a cent
        ("0.0008", "0.08", False),  # 100x exactly is allowed
        ("1.00", "0.0099", True),  # a hundredth of the estimate
        ("1.00", "0", True),  # a dollar call billed nothing
        ("0.00001", "0.009", False),  # 900x, but under a cent either way: rounding
        ("0", "5", False),  # no estimate to compare with (a free or unpriced model)
        (None, "5", False),
    ],
)
def test_a_bill_is_implausible_only_orders_of_magnitude_off_a_real_estimate(
    estimate: str | None, billed: str, implausible: bool
) -> None:
    guess = None if estimate is None else Decimal(estimate)
    assert Plausibility().implausible(guess, Decimal(billed)) is implausible
    assert Plausibility(max_ratio=None).implausible(guess, Decimal(billed)) is False


def test_an_implausible_bill_is_held_back_and_stored_only_when_allowed(
    server: LoopbackLLM, ledger_url: str
) -> None:
    insert_rows(ledger_url, [_openrouter_row(cost_usd=Decimal("0.0008"))])
    server.default = _generation(total_cost="99.5")
    held = _reconcile(ledger_url, server.url)
    assert (held.billed, held.held_back, held.failed, held.complete) == (0, 1, 0, False)
    assert held.implausible == [
        {"generation_id": GEN_ID, "estimated_usd": "0.0008000000", "billed_usd": "99.5"}
    ]
    assert held.billed_usd == 0 and _rows(ledger_url)[0].billed_at is None
    stored = _reconcile(ledger_url, server.url, plausibility=Plausibility(max_ratio=None))
    assert (stored.billed, stored.held_back) == (1, 0)
    assert _rows(ledger_url)[0].billed_cost_usd == Decimal("99.5")


def test_refetch_replaces_a_wrong_stored_bill_and_the_upstream_it_brought(
    server: LoopbackLLM, ledger_url: str
) -> None:
    billed = {"billed_cost_usd": Decimal("99.5"), "billed_at": at(5)}
    old_bill = {"provider_name": "Elsewhere"}
    insert_rows(
        ledger_url,
        [
            _openrouter_row(**billed, upstream="Elsewhere", billing=old_bill),
            _openrouter_row(**billed, upstream="Groq", billing=old_bill, generation_id="gen-kept"),
        ],
    )
    server.default = _generation()
    plain = _reconcile(ledger_url, server.url)
    assert plain.examined == 0 and server.requests == []  # a row is billed once...
    server.queue(_generation(), _generation("gen-kept"))
    # ...unless refetched (one at a time: the queued answers go in the rows' order)
    again = _reconcile(ledger_url, server.url, refetch=True, concurrency=1)
    assert (again.examined, again.billed, again.failed) == (2, 2, 0)
    repaired, kept = _rows(ledger_url)
    assert repaired.billed_cost_usd == Decimal("0.0000345200")
    assert repaired.billed_at > at(5) and repaired.upstream == "DeepInfra"
    assert kept.upstream == "Groq"  # the call named it: not the old bill's to replace
    assert kept.billing["provider_name"] == "DeepInfra"


def test_a_trickled_answer_ends_at_the_request_timeout(
    server: LoopbackLLM, sqlite_url: str
) -> None:
    insert_rows(sqlite_url, [_openrouter_row()])
    server.default = _generation()
    server.default.chunk_size, server.default.delay_s = 1, 0.1  # ~150 s for the whole body
    started = time.monotonic()
    report = _reconcile(sqlite_url, server.url, timeout=0.5)
    assert time.monotonic() - started < 5
    assert report.failed == 1 and "no whole answer within --timeout 0.5 s" in report.errors[0]


def test_the_deadline_ends_the_run_and_leaves_the_rest_for_a_rerun(
    server: LoopbackLLM, sqlite_url: str
) -> None:
    insert_rows(sqlite_url, [_openrouter_row(generation_id=f"gen-{i}") for i in range(6)])
    server.default = _generation()
    server.default.chunk_size, server.default.delay_s = 1, 0.1
    started = time.monotonic()
    report = _reconcile(
        sqlite_url, server.url, timeout=60, deadline=Deadline.after(1.0), concurrency=2
    )
    assert time.monotonic() - started < 4
    assert (report.examined, report.unfinished, report.billed, report.failed) == (6, 6, 0, 0)
    assert not report.complete


def test_deeply_nested_json_fails_its_row_without_a_traceback(
    server: LoopbackLLM, sqlite_url: str
) -> None:
    insert_rows(sqlite_url, [_openrouter_row(), _openrouter_row(generation_id="gen-2")])
    server.queue(Reply(b'{"data": {"id": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"))
    server.default = _generation("gen-2")
    report = _reconcile(sqlite_url, server.url, concurrency=1)
    assert (report.billed, report.failed) == (1, 1)
    assert "nested too deeply" in report.errors[0]


@pytest.mark.parametrize("chunked", [False, True])
def test_an_answer_above_its_cap_is_refused_unread(
    server: LoopbackLLM, sqlite_url: str, chunked: bool
) -> None:
    insert_rows(sqlite_url, [_openrouter_row()])
    server.default = _generation(padding="x" * MAX_GENERATION_BYTES)
    server.default.chunk_size = 65536 if chunked else None
    report = _reconcile(sqlite_url, server.url)
    assert (report.billed, report.failed) == (0, 1)
    assert "larger than 1,024 KiB; not read" in report.errors[0]
