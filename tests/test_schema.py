"""What ``cost_usd`` holds on each backend, as ledger/schema.py and the README state it."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from pathlib import Path

from sqlalchemy import select

from ledger.analytics import Analytics
from ledger.events import UsageEvent
from ledger.schema import SQLITE_EXACT_COST_BELOW, token_usage
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger

TEN_PLACES = Decimal("1e-10")


def _event(cost: Decimal) -> UsageEvent:
    return UsageEvent(
        started_at=dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
        requested_provider="openai",
        requested_model="gpt-4o-mini",
        provider="openai",
        status="ok",
        input_tokens=1000,
        cost_usd=cost,
        cost_source="computed",
    )


def _costs() -> list[Decimal]:
    """Costs with all ten decimals used, from a fraction of a cent to just below the
    bound, plus the awkward ones (tiny, a ninth of a cent, the largest exact one)."""
    rng = random.Random(20261201)
    bound = int(SQLITE_EXACT_COST_BELOW * 10**10)
    costs = [Decimal(rng.randrange(1, bound)) * TEN_PLACES for _ in range(300)]
    costs += [Decimal(rng.randrange(1, 10**8)) * TEN_PLACES for _ in range(100)]
    return [*costs, TEN_PLACES, Decimal("0.0011111111"), Decimal("99999.9999999999")]


def _record(url: str, journal: Path, events: list[UsageEvent]) -> None:
    with Ledger(url, journal_dir=journal) as led:
        for event in events:
            led.record(event)
        assert led.flush(30)


def test_costs_below_the_bound_come_back_exactly_from_the_ledger_and_the_analytics(
    ledger_url: str, tmp_path: Path
) -> None:
    costs = _costs()
    events = [_event(c) for c in costs]
    _record(ledger_url, tmp_path / "journal", events)
    engine = make_engine(ledger_url)
    with engine.connect() as conn:
        stored = dict(conn.execute(select(token_usage.c.event_id, token_usage.c.cost_usd)).all())
    engine.dispose()
    assert [stored[e.event_id] for e in events] == costs
    with Analytics(ledger_url, path=tmp_path / "analytics.duckdb") as analytics:
        copied = analytics.sql("SELECT event_id, cost_usd FROM token_usage")
        total = analytics.sql("SELECT sum(cost_usd) AS s FROM token_usage").s.iloc[0]
    assert dict(copied.values.tolist()) == {e.event_id: e.cost_usd for e in events}
    assert total == sum(costs)  # DuckDB sums DECIMAL exactly


def test_a_cost_beyond_the_bound_keeps_15_significant_digits_on_sqlite(
    ledger_url: str, tmp_path: Path
) -> None:
    cost = Decimal("1234567890.0123456789")  # 20 significant digits: a double holds 15
    event = _event(cost)
    _record(ledger_url, tmp_path / "journal", [event])
    engine = make_engine(ledger_url)
    with engine.connect() as conn:
        back = conn.execute(select(token_usage.c.cost_usd)).scalar_one()
    engine.dispose()
    if ledger_url.startswith("sqlite"):
        # The README's statement: beyond the bound, 15 significant digits hold.
        assert back != cost and abs(back - cost) <= cost * Decimal("1e-15")
    else:
        assert back == cost  # numeric(20, 10): exact
