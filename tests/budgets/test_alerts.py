"""Crossings, burn rate, projected time to the limit, and the webhook message (pure)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from ledger.budgets.alerts import (
    burn_rate,
    crossings,
    limit_reached_at,
    message,
    projection_text,
    slack_escape,
)
from ledger.budgets.config import parse_config
from ledger.budgets.status import BudgetStatus
from ledger.errors import BudgetConfigurationError

AT = dt.datetime(2026, 11, 30, 10, 0, tzinfo=dt.UTC)  # ten hours into the day
CONFIG = parse_config(
    {
        "warn_at": Decimal("0.8"),
        "daily": {"kind": "agent_day", "limit_usd": Decimal(10)},
        "strict": {"kind": "agent_day", "limit_usd": Decimal(10), "warn_at": Decimal("0.5")},
        "quiet": {"kind": "model_day", "limit_usd": Decimal(10), "warn_at": Decimal("0.99")},
        "turns": {"kind": "turn", "max_usd": Decimal("0.10")},
    }
)


def line(
    budget: str, spent: str, subject: str | None = "planner", metric: str = "limit_usd"
) -> BudgetStatus:
    limit = CONFIG.budget(budget).limits[metric]
    return BudgetStatus(
        budget, CONFIG.budget(budget).kind, metric, subject, limit, Decimal(spent), None
    )


def test_warn_at_comes_from_the_budget_else_the_file_default() -> None:
    assert CONFIG.budget("daily").warn_at == Decimal("0.8")
    assert CONFIG.budget("strict").warn_at == Decimal("0.5")


@pytest.mark.parametrize("value", [0, 1, Decimal("1.5"), Decimal("-0.1"), "0.8", True])
def test_warn_at_outside_0_and_1_is_refused_naming_the_key(value: object) -> None:
    with pytest.raises(BudgetConfigurationError, match=r"daily\.warn_at: expected a share"):
        parse_config({"daily": {"kind": "agent_day", "limit_usd": 5, "warn_at": value}})


def test_thresholds() -> None:
    found = crossings(
        [
            line("daily", "7.99"),  # under 80 %
            line("strict", "5.00"),  # exactly 50 %: warning
            line("quiet", "12.00"),  # first seen over the limit: the limit alert only
            line("daily", "8.00", subject="coder"),  # 80 %: warning
        ],
        CONFIG,
        AT,
    )
    assert [(c.budget, c.subject, c.threshold) for c in found] == [
        ("quiet", "planner", "limit"),
        ("daily", "coder", "warning"),
        ("strict", "planner", "warning"),
    ]
    assert all(c.period == dt.date(2026, 11, 30) for c in found)
    assert found[1].key == ("daily", "limit_usd", "coder", dt.date(2026, 11, 30), "warning")


def test_exactly_the_limit_is_a_warning_not_over_the_limit() -> None:
    (c,) = crossings([line("daily", "10.00")], CONFIG, AT)
    assert c.threshold == "warning"


def test_burn_rate_and_projected_time_to_the_limit() -> None:
    rate = burn_rate(Decimal("8.00"), AT)
    assert rate == Decimal("0.8")  # $8 over 10 h
    reached = limit_reached_at(Decimal("8.00"), Decimal(10), rate, AT)
    assert reached == AT + dt.timedelta(hours=2.5)
    (c,) = crossings([line("daily", "8.00")], CONFIG, AT)
    assert (c.burn_usd_per_hour, c.limit_reached_at) == (rate, reached)
    assert projection_text(c) == "in 2 h 30 min at the current rate (12:30 UTC)"


def test_early_spend_counts_at_least_an_hour_and_a_limit_beyond_midnight_is_not_today() -> None:
    early = AT.replace(hour=0, minute=10)
    assert burn_rate(Decimal("1"), early) == Decimal(1)  # one hour, not ten minutes
    late = AT.replace(hour=23)
    assert limit_reached_at(Decimal("8.5"), Decimal(10), Decimal("0.01"), late) is None
    assert limit_reached_at(Decimal("8.5"), Decimal(10), Decimal(0), late) is None
    assert limit_reached_at(Decimal("11"), Decimal(10), Decimal(1), late) == late


def test_a_turn_budget_has_no_burn_rate() -> None:
    (c,) = crossings([line("turns", "0.20", subject=None, metric="max_usd")], CONFIG, AT)
    assert c.threshold == "limit" and c.burn_usd_per_hour is None
    assert projection_text(c) == "n/a (per-turn figure)"
    assert message(c)["ledger"]["burn_usd_per_hour"] is None


def test_names_are_data_in_the_message() -> None:
    hostile = "<!channel> & <https://evil|click>\x1b[31m"
    (c,) = crossings([line("daily", "9.00", subject=hostile)], CONFIG, AT)
    body = message(c)
    assert "<" not in body["text"] and ">" not in body["text"] and "\x1b" not in body["text"]
    assert "&lt;!channel&gt; &amp; &lt;https://evil|click&gt;" in body["text"]
    assert body["ledger"]["subject"] == hostile  # the machine-readable copy is exact
    assert slack_escape("a&b") == "a&amp;b"
