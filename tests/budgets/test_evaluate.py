"""Evaluating budgets over a real ledger: day budgets, scopes, ordering, projections."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

from ledger.budgets import Budget, BudgetConfig, evaluate
from ledger.budgets.status import budget_status, burn_history, project
from tests.analytics.builders import T0, insert_rows, open_analytics, response_cache_row, row


def test_model_day_budget_counts_whole_utc_days_and_names_the_worst(
    ledger_url: str, tmp_path: Path
) -> None:
    insert_rows(
        ledger_url,
        [
            row(0, requested_model="gpt-4o", cost_usd=Decimal("3")),  # 09:00 on day 1
            row(60, requested_model="gpt-4o", cost_usd=Decimal("3")),
            row(24 * 60, requested_model="gpt-4o", cost_usd=Decimal("1")),  # day 2
            row(0, requested_model="mini", cost_usd=Decimal("9")),
        ],
    )
    budget = Budget("gpt", "model_day", {"limit_usd": Decimal("5")}, model="gpt-4o")
    # A window starting mid-day still counts that day whole (09:00 and 10:00).
    start = T0 + dt.timedelta(hours=3)
    with open_analytics(ledger_url, tmp_path) as a:
        (result,) = evaluate(a, BudgetConfig((budget,)), start=start, end=None).results
    assert result.exceeded and result.actual_usd == Decimal("6")
    assert (result.subject, result.day) == ("gpt-4o", dt.date(2025, 3, 1))
    assert result.headroom_usd == Decimal("-1")
    assert result.reason.startswith("model gpt-4o on 2025-03-01: $6.0000 exceeds $5.0000")


def test_every_agent_has_its_own_day_limit_and_the_holding_budgets_follow(
    ledger_url: str, tmp_path: Path
) -> None:
    insert_rows(
        ledger_url,
        [
            row(0, actor_id="planner", cost_usd=Decimal("0.4")),
            row(1, actor_id="coder", cost_usd=Decimal("0.9")),
            row(2, actor_id="coder", cost_usd=Decimal("0.3")),
            response_cache_row(3, actor_id="coder"),  # no provider spend, not unknown
        ],
    )
    config = BudgetConfig(
        (
            Budget("roomy", "turn", {"max_usd": Decimal("10")}),
            Budget("daily", "agent_day", {"limit_usd": Decimal("1")}),
            Budget("tight_turn", "turn", {"max_usd": Decimal("0.95")}),
        )
    )
    with open_analytics(ledger_url, tmp_path) as a:
        report = evaluate(a, config)
    assert [r.budget for r in report.results] == ["daily", "tight_turn", "roomy"]
    daily = report.results[0]
    assert daily.exceeded and daily.subject == "coder" and daily.actual_usd == Decimal("1.2")
    assert not report.results[1].exceeded and report.results[1].count == 4
    assert all(r.unknown_cost_rows == 0 for r in report.results)
    assert report.as_dict()["exceeded"] == ["daily"]


def test_check_tags_narrow_and_override_a_budgets_own_tags(ledger_url: str, tmp_path: Path) -> None:
    insert_rows(
        ledger_url,
        [
            row(0, cost_usd=Decimal("1"), tags={"env": "prod", "run": "a"}),
            row(1, cost_usd=Decimal("2"), tags={"env": "prod", "run": "b"}),
            row(2, cost_usd=Decimal("4"), tags={"env": "ci", "run": "a"}),
        ],
    )
    budget = Budget("prod", "turn", {"mean_usd": Decimal("5")}, tags={"env": "prod"})
    config = BudgetConfig((budget,))
    with open_analytics(ledger_url, tmp_path) as a:
        mean = {
            str(tags): evaluate(a, config, tags=tags).results[0].actual_usd
            for tags in ({}, {"run": "a"}, {"env": "ci"})
        }
    assert mean == {
        "{}": Decimal("1.5"),
        "{'run': 'a'}": Decimal("1"),
        "{'env': 'ci'}": Decimal("4"),
    }


def test_status_projects_the_days_spend_and_history_keeps_each_day(
    ledger_url: str, tmp_path: Path
) -> None:
    insert_rows(
        ledger_url,
        [
            row(0, actor_id="planner", cost_usd=Decimal("2")),
            row(-60 * 24, actor_id="planner", cost_usd=Decimal("7")),  # the day before
        ],
    )
    config = BudgetConfig((Budget("daily", "agent_day", {"limit_usd": Decimal("10")}),))
    at = T0 + dt.timedelta(hours=3)  # 12:00 UTC: half the day gone
    with open_analytics(ledger_url, tmp_path) as a:
        (line,) = budget_status(a, config, at=at)
        frame = burn_history(a, config, at=at, days=3)
    assert (line.subject, line.spent_usd, line.projected_usd) == ("planner", 2, 4)
    assert line.used == 0.4
    assert list(frame["day"]) == [dt.date(2025, 2, 28), dt.date(2025, 3, 1)]
    assert list(frame["actual_usd"]) == [Decimal("7"), Decimal("2")]


def test_projection_never_divides_by_an_instant() -> None:
    assert project(Decimal("1"), dt.timedelta(minutes=5)) == Decimal("24")
    assert project(Decimal("1"), dt.timedelta(days=2)) == Decimal("1")
    assert project(Decimal("3"), dt.timedelta(hours=23, minutes=59, seconds=59.999999)) == 3
