"""Check every budget over a window of the ledger: what ``ledger budget check`` reports.

A *turn* budget is checked over the calls in the window: the mean, the p95
(nearest rank: 95 % of turns cost at most this) and the max cost per turn. A
per-day budget (``agent_day``, ``model_day``) over each UTC day the window
touches, whole days, each agent (or model) separately: the worst one is
reported. Tags given to the check (``--tag run=ci-123``) narrow every budget's
scope and override a budget's own tag of the same name.

Unknown cost (see :mod:`ledger.analytics.read.spend`) is counted and named in the
reason; with ``unknown_cost = "fail"`` it fails the budget.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Final

import pandas as pd  # type: ignore[import-untyped]

from ledger.analytics.read.api import Analytics
from ledger.analytics.read.spend import SpendScope, spend_by_subject, turn_stats
from ledger.budgets.config import Budget, BudgetConfig

_CENT: Final = Decimal("0.0001")
METRIC_LABELS: Final = {
    "mean_usd": "mean cost per turn",
    "p95_usd": "p95 cost per turn",
    "max_usd": "max cost per turn",
    "limit_usd": "spend per day",
}


def usd(amount: Decimal | None) -> str:
    """``$0.0123``: four decimals, enough for per-turn costs."""
    if amount is None:
        return "unknown"
    sign = "-" if amount < 0 else ""
    return f"{sign}${abs(amount).quantize(_CENT):,}"


def measured_usd(amount: Decimal | None, unknown_cost_rows: int) -> str:
    """``usd(amount)``, or ``–`` when there was nothing to measure: no turns is not an
    unknown cost (that needs rows of unknown cost)."""
    return "–" if amount is None and not unknown_cost_rows else usd(amount)


@dataclass(frozen=True, slots=True)
class Result:
    """One limit of one budget over the window."""

    budget: str
    kind: str
    metric: str
    limit_usd: Decimal
    actual_usd: Decimal | None
    exceeded: bool
    reason: str
    subject: str | None = None
    day: dt.date | None = None
    count: int = 0
    unknown_cost_rows: int = 0
    unknown_cost_calls: int = 0

    @property
    def headroom_usd(self) -> Decimal | None:
        return None if self.actual_usd is None else self.limit_usd - self.actual_usd

    @property
    def used(self) -> float:
        """actual / limit (0 when nothing was spent; inf for any spend on a zero limit)."""
        if not self.actual_usd:
            return 0.0
        return float(self.actual_usd / self.limit_usd) if self.limit_usd else float("inf")

    def as_dict(self) -> dict[str, Any]:
        def money(value: Decimal | None) -> str | None:
            return None if value is None else str(value)

        return {
            "budget": self.budget,
            "kind": self.kind,
            "metric": self.metric,
            "limit_usd": money(self.limit_usd),
            "actual_usd": money(self.actual_usd),
            "headroom_usd": money(self.headroom_usd),
            "exceeded": self.exceeded,
            "reason": self.reason,
            "subject": self.subject,
            "day": None if self.day is None else self.day.isoformat(),
            "count": self.count,
            "unknown_cost_rows": self.unknown_cost_rows,
            "unknown_cost_calls": self.unknown_cost_calls,
        }


@dataclass(frozen=True, slots=True)
class CheckReport:
    """Every result, exceeded budgets first, then the ones closest to their limit."""

    results: tuple[Result, ...]
    start: dt.datetime | None
    end: dt.datetime | None
    tags: Mapping[str, str]

    @property
    def ok(self) -> bool:
        return not any(r.exceeded for r in self.results)

    @property
    def exceeded(self) -> tuple[Result, ...]:
        return tuple(r for r in self.results if r.exceeded)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "window": {
                "start": None if self.start is None else self.start.isoformat(),
                "end": None if self.end is None else self.end.isoformat(),
                "tags": dict(self.tags),
            },
            "exceeded": [r.budget for r in self.exceeded],
            "results": [r.as_dict() for r in self.results],
        }


def start_of_day(at: dt.datetime) -> dt.datetime:
    """Midnight UTC of the UTC day ``at`` falls in."""
    utc = at.astimezone(dt.UTC)
    return dt.datetime.combine(utc.date(), dt.time(), dt.UTC)


def _unknown_note(rows: int, calls: int | None = None) -> str:
    if not rows:
        return ""
    turns = f"{calls:,} turn(s), " if calls else ""
    return f"; {turns}{rows} row(s) of unknown cost not counted"


def _judge(
    budget: Budget, metric: str, actual: Decimal | None, unknown_rows: int, policy: str
) -> tuple[bool, str]:
    """Whether the limit is exceeded, and the verdict's words (without the figures' context)."""
    limit = budget.limits[metric]
    if actual is not None and actual > limit:
        return True, f"{usd(actual)} exceeds {usd(limit)} by {usd(actual - limit)}"
    if unknown_rows and policy == "fail":
        return True, f'{unknown_rows} row(s) of unknown cost (unknown_cost = "fail")'
    if actual is None:
        return False, "nothing to measure"
    return False, f"{usd(actual)}, {usd(limit - actual)} under {usd(limit)}"


def _turn_results(budget: Budget, stats: Mapping[str, Any], policy: str) -> list[Result]:
    calls, unknown_calls = int(stats["calls"]), int(stats["unknown_cost_calls"])
    unknown_rows = int(stats["unknown_cost_rows"])
    known = calls - unknown_calls
    figures: dict[str, Decimal | None] = {
        "mean_usd": (stats["known_usd"] / known) if known else None,
        "p95_usd": stats["p95_usd"],
        "max_usd": stats["max_usd"],
    }
    results = []
    for metric in budget.limits:
        actual = figures[metric]
        exceeded, verdict = _judge(budget, metric, actual, unknown_rows, policy)
        what = METRIC_LABELS[metric]
        reason = (
            f"no turns in the window{_unknown_note(unknown_rows, unknown_calls)}"
            if not known and not unknown_rows
            else f"{what} over {known:,} turn(s): {verdict}"
            f"{_unknown_note(unknown_rows, unknown_calls)}"
        )
        results.append(
            Result(
                budget.name,
                budget.kind,
                metric,
                budget.limits[metric],
                actual,
                exceeded,
                reason,
                count=known,
                unknown_cost_rows=unknown_rows,
                unknown_cost_calls=unknown_calls,
            )
        )
    return results


def _day_result(budget: Budget, frame: pd.DataFrame, policy: str) -> Result:
    noun = "agent" if budget.kind == "agent_day" else "model"
    unknown_rows = int(frame["unknown_cost_rows"].sum()) if not frame.empty else 0
    limit = budget.limits["limit_usd"]
    if frame.empty:
        # no row in scope spent anything: $0, not unknown
        reason = f"no spend in the window{_unknown_note(unknown_rows)}"
        return Result(budget.name, budget.kind, "limit_usd", limit, Decimal(0), False, reason)
    worst = frame.sort_values("cost_usd", ascending=False, kind="stable").iloc[0]
    over = int((frame["cost_usd"] > limit).sum())
    actual: Decimal = worst["cost_usd"]
    subject = "(no agent)" if pd.isna(worst["subject"]) else str(worst["subject"])
    day = pd.Timestamp(worst["period"]).date()
    exceeded, verdict = _judge(budget, "limit_usd", actual, unknown_rows, policy)
    days = f" ({over} {noun}-day(s) over)" if over > 1 else ""
    reason = f"{noun} {subject} on {day}: {verdict}{days}{_unknown_note(unknown_rows)}"
    return Result(
        budget.name,
        budget.kind,
        "limit_usd",
        limit,
        actual,
        exceeded,
        reason,
        subject=subject,
        day=day,
        count=len(frame),
        unknown_cost_rows=unknown_rows,
    )


def evaluate_budget(
    analytics: Analytics,
    budget: Budget,
    *,
    start: dt.datetime | None,
    end: dt.datetime | None,
    tags: Mapping[str, str] | None = None,
    unknown_cost: str = "report",
) -> list[Result]:
    """The results of one budget over ``[start, end)`` and the rows carrying ``tags``."""
    scope = SpendScope(
        start=start,
        end=end,
        actor=budget.agent,
        model=budget.model,
        tags={**budget.tags, **(tags or {})},
    )
    if budget.kind == "turn":
        return _turn_results(budget, turn_stats(analytics, scope), unknown_cost)
    whole_days = replace(scope, start=None if start is None else start_of_day(start))
    by = budget.by
    return [_day_result(budget, spend_by_subject(analytics, whole_days, by=by), unknown_cost)]


def evaluate(
    analytics: Analytics,
    config: BudgetConfig,
    *,
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    tags: Mapping[str, str] | None = None,
) -> CheckReport:
    """Every budget of ``config`` over the window; see the module doc."""
    results = [
        result
        for budget in config.budgets
        for result in evaluate_budget(
            analytics, budget, start=start, end=end, tags=tags, unknown_cost=config.unknown_cost
        )
    ]
    results.sort(key=lambda r: (not r.exceeded, -r.used))
    return CheckReport(tuple(results), start, end, dict(tags or {}))
