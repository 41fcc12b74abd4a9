"""The cost page's estimated-vs-billed section: honest when nothing is reconciled, and the
coverage and difference of the reconciled rows when some are (computed here by hand)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from sqlalchemy import select, update

from ledger.schema import token_usage
from ledger.store.engine import make_engine
from tests.dashboards.test_app import assert_clean, metrics, open_page

_t = token_usage.c


def test_nothing_reconciled_says_every_cost_is_an_estimate(workload_url: str) -> None:
    at = open_page("screens/cost.py")
    assert_clean(at)
    shown = metrics(at)
    assert shown["Rows reconciled"] == "0.0%"
    assert shown["Billed (reconciled rows)"] == "–" and shown["Billed − estimated"] == "–"
    assert any("every cost on this page is the ledger's estimate" in i.value for i in at.info)
    assert any("cannot bill single rows" in i.value for i in at.info)


def test_reconciled_rows_show_coverage_and_the_difference(workload_url: str) -> None:
    """Bill three priced OpenRouter rows 10% above their estimate, as a reconcile would."""
    engine = make_engine(workload_url)
    try:
        with engine.begin() as conn:
            rows = conn.execute(
                select(_t.id, _t.cost_usd)
                .where(_t.provider == "openrouter", _t.cost_usd.is_not(None))
                .order_by(_t.id)
                .limit(3)
            ).all()
            for row_id, cost in rows:
                conn.execute(
                    update(token_usage)
                    .where(_t.id == row_id)
                    .values(
                        billed_cost_usd=cost * Decimal("1.1"), billed_at=dt.datetime.now(dt.UTC)
                    )
                )
            total_rows = len(conn.execute(select(_t.id)).all())
            spend = sum(c for (c,) in conn.execute(select(_t.cost_usd)) if c is not None)
    finally:
        engine.dispose()
    estimate = sum(cost for _, cost in rows)
    at = open_page("screens/cost.py")
    assert_clean(at)
    shown = metrics(at)
    assert shown["Rows reconciled"] == f"{100 * 3 / total_rows:.1f}%"
    assert shown["Spend reconciled"] == f"{100 * float(estimate / spend):.1f}%"
    billed, gap = estimate * Decimal("1.1"), estimate * Decimal("0.1")
    assert 0 < gap < billed < 1  # sub-dollar amounts: shown with four decimals
    assert shown["Billed (reconciled rows)"] == f"${billed:,.4f}"
    assert shown["Billed − estimated"] == f"+${gap:,.4f}"
    assert not any("every cost on this page" in i.value for i in at.info)
