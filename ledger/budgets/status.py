"""Today's burn against each budget: ``ledger budget status`` and the Budgets page.

*Today* is the UTC day of ``at`` (default: now), counted up to ``at``. A
per-day budget gets one line per agent (or model) that spent today, with its
projected end-of-day spend: the spend so far at the day's average rate
(``spent x 24 h / elapsed``, with elapsed at least one hour so an early
morning call does not project a fortune). A turn budget gets one line per
limit over today's turns. Lines are ordered by how much of their limit they
use, projection included: the closest first.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

import pandas as pd  # type: ignore[import-untyped]

from ledger.analytics.read.api import Analytics
from ledger.analytics.read.spend import SpendScope, spend_by_subject, turn_stats, turn_stats_by_day
from ledger.budgets.config import Budget, BudgetConfig
from ledger.budgets.evaluation import METRIC_LABELS, start_of_day

DAY: Final = dt.timedelta(days=1)
MIN_ELAPSED: Final = dt.timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """One budget (and agent or model, for per-day budgets) today."""

    budget: str
    kind: str
    metric: str
    subject: str | None
    limit_usd: Decimal
    spent_usd: Decimal | None
    projected_usd: Decimal | None
    unknown_cost_rows: int = 0

    @property
    def used(self) -> float:
        """The larger of spent and projected, over the limit (inf for spend on a zero limit)."""
        figure = max((v for v in (self.spent_usd, self.projected_usd) if v is not None), default=0)
        if not figure:
            return 0.0
        return float(figure / self.limit_usd) if self.limit_usd else float("inf")

    def as_dict(self) -> dict[str, Any]:
        def money(value: Decimal | None) -> str | None:
            return None if value is None else str(value)

        return {
            "budget": self.budget,
            "kind": self.kind,
            "metric": self.metric,
            "subject": self.subject,
            "limit_usd": money(self.limit_usd),
            "spent_usd": money(self.spent_usd),
            "projected_usd": money(self.projected_usd),
            "used": None if self.used == float("inf") else round(self.used, 4),
            "unknown_cost_rows": self.unknown_cost_rows,
        }


def project(spent: Decimal, elapsed: dt.timedelta) -> Decimal:
    """End-of-day spend at the rate so far (elapsed clamped to [1 h, 24 h])."""
    clamped = min(max(elapsed, MIN_ELAPSED), DAY)
    # Whole seconds: the last microsecond of a day counts as the whole day.
    return spent * Decimal(int(DAY.total_seconds())) / Decimal(math.ceil(clamped.total_seconds()))


def _scope(budget: Budget, start: dt.datetime, end: dt.datetime) -> SpendScope:
    return SpendScope(
        start=start, end=end, actor=budget.agent, model=budget.model, tags=budget.tags
    )


def _day_lines(analytics: Analytics, budget: Budget, at: dt.datetime) -> list[BudgetStatus]:
    midnight = start_of_day(at)
    by = budget.by
    frame = spend_by_subject(analytics, _scope(budget, midnight, at), by=by)
    limit = budget.limits["limit_usd"]
    return [
        BudgetStatus(
            budget.name,
            budget.kind,
            "limit_usd",
            "(no agent)" if pd.isna(subject) else str(subject),
            limit,
            cost,
            project(cost, at - midnight),
            int(unknown),
        )
        for subject, cost, unknown in zip(
            frame["subject"], frame["cost_usd"], frame["unknown_cost_rows"], strict=True
        )
    ]


def _turn_lines(analytics: Analytics, budget: Budget, at: dt.datetime) -> list[BudgetStatus]:
    stats = turn_stats(analytics, _scope(budget, start_of_day(at), at))
    known = int(stats["calls"]) - int(stats["unknown_cost_calls"])
    figures = {
        "mean_usd": stats["known_usd"] / known if known else None,
        "p95_usd": stats["p95_usd"],
        "max_usd": stats["max_usd"],
    }
    return [
        BudgetStatus(
            budget.name,
            budget.kind,
            metric,
            None,
            limit,
            figures[metric],
            None,
            int(stats["unknown_cost_rows"]),
        )
        for metric, limit in budget.limits.items()
    ]


def budget_status(
    analytics: Analytics, config: BudgetConfig, *, at: dt.datetime | None = None
) -> list[BudgetStatus]:
    """Every budget today up to ``at``, the closest to its limit first."""
    at = at or dt.datetime.now(dt.UTC)
    lines = [
        line
        for budget in config.budgets
        for line in (
            _day_lines(analytics, budget, at)
            if budget.per_day
            else _turn_lines(analytics, budget, at)
        )
    ]
    return sorted(lines, key=lambda s: -s.used)


def burn_history(
    analytics: Analytics, config: BudgetConfig, *, at: dt.datetime | None = None, days: int = 14
) -> pd.DataFrame:
    """Per budget, subject and UTC day over the last ``days`` days: the figure and its limit.

    Columns: budget, metric (``limit_usd`` or a turn metric), subject, day, actual_usd, limit_usd.
    """
    at = at or dt.datetime.now(dt.UTC)
    end = start_of_day(at) + DAY
    start = end - days * DAY
    frames = []
    for budget in config.budgets:
        scope = _scope(budget, start, end)
        if budget.per_day:
            by = budget.by
            spend = spend_by_subject(analytics, scope, by=by)
            frames.append(
                pd.DataFrame(
                    {
                        "budget": budget.name,
                        "metric": "limit_usd",
                        "subject": spend["subject"].fillna("(no agent)"),
                        "day": spend["period"].dt.date,
                        "actual_usd": spend["cost_usd"],
                        "limit_usd": budget.limits["limit_usd"],
                    }
                )
            )
            continue
        turns = turn_stats_by_day(analytics, scope)
        known = turns["calls"] - turns["unknown_cost_calls"]
        figures = {
            "mean_usd": [
                s / k if k else None for s, k in zip(turns["known_usd"], known, strict=True)
            ],
            "p95_usd": list(turns["p95_usd"]),
            "max_usd": list(turns["max_usd"]),
        }
        for metric, limit in budget.limits.items():
            frames.append(
                pd.DataFrame(
                    {
                        "budget": budget.name,
                        "metric": metric,
                        "subject": METRIC_LABELS[metric],
                        "day": pd.to_datetime(turns["day"]).dt.date,
                        "actual_usd": figures[metric],
                        "limit_usd": limit,
                    }
                )
            )
    columns = ["budget", "metric", "subject", "day", "actual_usd", "limit_usd"]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
