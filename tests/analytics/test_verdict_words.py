"""The verdict's words come from Python, from its typed figures, wherever they are read;
and its money is projected from the traffic that continues.

A few golden strings pin the wording (ledger.analytics.read.verdict_words); the rest
of the verdict's tests assert kinds and numbers.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest

from ledger.analytics.read import verdict_words as words
from ledger.analytics.read.verdict import Judgement, Verdict
from tests.analytics.builders import T0, insert_rows, open_analytics, served
from tests.analytics.test_verdict import DAY_MIN, ROW, scenario_ledger

YEAR_MIN = 365 * DAY_MIN

IGNORE = Verdict(
    requested_model="m",
    verdict="warranted",
    action="ignore",
    pinned_upstream="Amazon Bedrock",
    best_upstream="Anthropic",
    recommendation='{"ignore":["amazon-bedrock"]}',
    sessions_affected_share=0.1,
    pinned_worse=True,
    errors_worse=True,
    worse_judged=(
        Judgement(
            upstream="Amazon Bedrock",
            judged_against="Anthropic",
            errors_worse=True,
            latency_worse=True,
            cost_worse=False,
            error_rate=0.2,
            against_error_rate=0.0,
            p95_ms=3000.0,
            against_p95_ms=1000.0,
            cost_per_mtok=1.0,
            against_cost_per_mtok=1.0,
        ),
    ),
    cost_change_usd=-0.02,
    cost_change_share=-0.25,
    monthly_effect_usd=Decimal("-0.6"),
    recent_calls_per_day=250.0,
    window_start=T0,
)


def test_the_headline_and_the_effect_read_as_pinned() -> None:
    assert words.headline(IGNORE) == (
        "Ignore Amazon Bedrock (vs Anthropic: 20.0% errors vs 0.0%, p95 3.0 s vs 1.0 s), "
        "on 10% of sessions"
    )
    assert words.effect(IGNORE) == (
        "it would change spend by -$0.0200 (-25.0%) over the ledger's span, -$0.60 per 30 days "
        "at the last 30 days' traffic (250.0 calls/day from 2025-03-01 09:00 UTC)"
    )
    assert words.monthly(IGNORE) == "saves $0.60 a month"


def test_unobservable_errors_are_said_so() -> None:
    hidden = Verdict(
        requested_model="m",
        verdict="not_warranted",
        error_rates_observable=False,
        unattributed_errors=30,
        routed_attempts=210,
    )
    assert words.errors_note(hidden) == (
        " Error rates were not observable, since no failed OpenRouter attempt named its "
        "upstream (OpenRouter retries other upstreams internally; 30 of the model's 210 "
        "OpenRouter attempts failed without naming one)."
    )


def _monthly(url: str, tmp_path: Path) -> dict[str, Decimal]:
    with open_analytics(url, tmp_path, min_samples=50) as analytics:
        return {
            v.requested_model: v.monthly_effect_usd
            for v in analytics.verdicts()
            if v.monthly_effect_usd is not None
        }


def test_rows_a_year_older_change_no_monthly_effect_by_more_than_a_tenth(
    sqlite_url: str, tmp_path: Path
) -> None:
    insert_rows(sqlite_url, scenario_ledger())
    before = _monthly(sqlite_url, tmp_path / "before")
    # a README example written into the ledger a year ago, and some of a model's own
    # traffic then: the ledger now spans a year with nothing in between
    old = [served(-YEAR_MIN, None, requested_model="readme-example", **ROW)]
    old += [
        served(-YEAR_MIN + i, "Anthropic", requested_model="minority", **ROW) for i in range(10)
    ]
    insert_rows(sqlite_url, old)
    after = _monthly(sqlite_url, tmp_path / "after")
    assert set(after) == set(before) and len(before) >= 4
    for model, effect in before.items():
        assert float(after[model]) == pytest.approx(float(effect), rel=0.10), model


def test_the_verdict_states_its_window(sqlite_url: str, tmp_path: Path) -> None:
    insert_rows(sqlite_url, scenario_ledger())
    with open_analytics(sqlite_url, tmp_path, min_samples=50) as analytics:
        (v,) = [v for v in analytics.verdicts() if v.requested_model == "minority"]
    assert (v.window_start, v.window_end) == (T0, T0 + dt.timedelta(days=1))
    assert v.window_days == pytest.approx(1.0)
    assert v.recent_calls_per_day == pytest.approx(v.recent_calls or 0)
    assert v.monthly_effect_usd == Decimal("-0.6")
    assert " Judged on the rows from 2025-03-01 09:00 to 2025-03-02 09:00 UTC." in (words.reason(v))


def test_sql_readers_get_the_sentences_python_writes(sqlite_url: str, tmp_path: Path) -> None:
    insert_rows(sqlite_url, scenario_ledger()[:400])
    with open_analytics(sqlite_url, tmp_path, min_samples=50) as analytics:
        query = "SELECT requested_model, headline, reason FROM provider_order_verdict ORDER BY 1"
        first = analytics.sql(query)
        insert_rows(sqlite_url, scenario_ledger()[400:])  # new figures, new words
        analytics.refresh()
        api = analytics.provider_order_verdict()
        through_sql = analytics.sql(query)
        path = analytics.path
    assert list(through_sql["reason"]) == list(api["reason"]) != list(first["reason"])
    assert list(through_sql["headline"]) == list(api["headline"])
    # a DuckDB client of the file, with no Python of ours, reads the same words
    con = duckdb.connect(str(path), read_only=True)
    try:
        raw = con.execute(query).fetchall()
    finally:
        con.close()
    assert [r[2] for r in raw] == list(api["reason"])
