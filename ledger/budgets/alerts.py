"""Which budgets crossed a threshold today, and the Slack-compatible message saying so.

Pure functions over :func:`ledger.budgets.status.budget_status` lines (today's
spend per budget and agent or model, up to ``at``):

* a *warning* when a figure reaches ``warn_at`` of its limit (budgets with a
  ``warn_at`` only);
* a *limit* alert when it exceeds the limit (as ``ledger budget check`` judges
  exceeded). A line first seen over its limit gets the limit alert only: the
  warning it skipped would say less, later.

Each alert names its period, the UTC day, so "at most one alert per budget per
threshold per period" is a key (:mod:`ledger.budgets.notify` keeps it).

For per-day budgets the message carries the *burn rate* (today's spend per
hour so far, with at least one hour elapsed, as the end-of-day projection
counts it) and the *projected time to the limit* at that rate; a turn
budget's figure is a per-turn statistic, which has neither.

The message is what Slack's incoming webhooks take (``text`` plus a coloured
``attachments`` entry with fields), which Mattermost, Rocket.Chat and Discord's
``/slack`` endpoints accept too, with a machine-readable copy under ``ledger``.
Budget names and subjects are data: ``&``, ``<`` and ``>`` are escaped as
Slack's message format requires, so a name can never become a link or a mention.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Literal

from ledger.budgets.config import BudgetConfig
from ledger.budgets.evaluation import METRIC_LABELS, start_of_day, usd
from ledger.budgets.status import DAY, MIN_ELAPSED, BudgetStatus

Threshold = Literal["warning", "limit"]
_HOUR: Final = Decimal(3600)
COLORS: Final = {"warning": "#daa038", "limit": "#d00000"}


@dataclass(frozen=True, slots=True)
class Crossing:
    """One budget line past one threshold in one period."""

    budget: str
    kind: str
    metric: str
    subject: str | None
    threshold: Threshold
    period: dt.date
    spent_usd: Decimal
    limit_usd: Decimal
    warn_at: Decimal | None
    at: dt.datetime
    burn_usd_per_hour: Decimal | None = None
    limit_reached_at: dt.datetime | None = None

    @property
    def used(self) -> float | None:
        return float(self.spent_usd / self.limit_usd) if self.limit_usd else None

    @property
    def key(self) -> tuple[str, str, str, dt.date, str]:
        """What "one alert per budget per threshold per period" counts."""
        return (self.budget, self.metric, self.subject or "", self.period, self.threshold)


def burn_rate(spent: Decimal, at: dt.datetime) -> Decimal:
    """Today's spend per hour up to ``at`` (at least one hour elapsed, as the projection)."""
    elapsed = min(max(at - start_of_day(at), MIN_ELAPSED), DAY)
    return spent * _HOUR / Decimal(int(elapsed.total_seconds()))


def limit_reached_at(
    spent: Decimal, limit: Decimal, rate: Decimal, at: dt.datetime
) -> dt.datetime | None:
    """When spend reaches ``limit`` at ``rate`` per hour: ``at`` if already there, None
    if it would not before the day (and the budget's period) ends."""
    if spent >= limit:
        return at
    if rate <= 0:
        return None
    when = at + dt.timedelta(hours=float((limit - spent) / rate))
    return when if when < start_of_day(at) + DAY else None


def _crossed(line: BudgetStatus, warn_at: Decimal | None) -> Threshold | None:
    spent = line.spent_usd
    if spent is None:
        return None
    if spent > line.limit_usd:
        return "limit"
    if warn_at is not None and spent >= warn_at * line.limit_usd and spent > 0:
        return "warning"
    return None


def crossings(
    lines: Iterable[BudgetStatus], config: BudgetConfig, at: dt.datetime
) -> list[Crossing]:
    """Every line past a threshold (see the module doc), the limit ones first."""
    found = []
    for line in lines:
        budget = config.budget(line.budget)
        threshold = _crossed(line, budget.warn_at)
        if threshold is None or line.spent_usd is None:
            continue
        rate = reached = None
        if budget.per_day:
            rate = burn_rate(line.spent_usd, at)
            reached = limit_reached_at(line.spent_usd, line.limit_usd, rate, at)
        found.append(
            Crossing(
                budget=line.budget,
                kind=line.kind,
                metric=line.metric,
                subject=line.subject,
                threshold=threshold,
                period=at.astimezone(dt.UTC).date(),
                spent_usd=line.spent_usd,
                limit_usd=line.limit_usd,
                warn_at=budget.warn_at,
                at=at,
                burn_usd_per_hour=rate,
                limit_reached_at=reached,
            )
        )
    return sorted(found, key=lambda c: (c.threshold != "limit", c.budget, c.subject or ""))


def slack_escape(text: str) -> str:
    """Text as Slack shows it literally: ``&``, ``<`` and ``>`` escaped, controls dropped."""
    cleaned = "".join(c if c.isprintable() else " " for c in text)
    return cleaned.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _duration(delta: dt.timedelta) -> str:
    minutes = max(0, round(delta.total_seconds() / 60))
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min"


def projection_text(c: Crossing) -> str:
    if c.burn_usd_per_hour is None:
        return "n/a (per-turn figure)"
    if c.limit_reached_at is None:
        return "not today at the current rate"
    if c.limit_reached_at <= c.at:
        return "reached"
    when = c.limit_reached_at.astimezone(dt.UTC).strftime("%H:%M UTC")
    return f"in {_duration(c.limit_reached_at - c.at)} at the current rate ({when})"


def headline(c: Crossing) -> str:
    used = f" ({100 * c.used:.0f}%)" if c.used is not None else ""
    what = "over its limit" if c.threshold == "limit" else f"past its warning at {c.warn_at:%}"
    whom = f" for {c.subject}" if c.subject else ""
    figure = METRIC_LABELS.get(c.metric, c.metric)
    return (
        f"Budget {c.budget} is {what}: {figure} {usd(c.spent_usd)} of {usd(c.limit_usd)}"
        f"{used}{whom} on {c.period.isoformat()}"
    )


def message(c: Crossing) -> dict[str, Any]:
    """The webhook body for one crossing (Slack-compatible; see the module doc)."""
    fields = [
        ("Spend", usd(c.spent_usd)),
        ("Limit", usd(c.limit_usd)),
        (
            "Burn rate",
            "n/a" if c.burn_usd_per_hour is None else f"{usd(c.burn_usd_per_hour)}/h",
        ),
        ("Limit reached", projection_text(c)),
    ]
    text = slack_escape(headline(c))
    return {
        "text": text,
        "attachments": [
            {
                "color": COLORS[c.threshold],
                "fallback": text,
                "fields": [
                    {"title": t, "value": slack_escape(v), "short": True} for t, v in fields
                ],
            }
        ],
        "ledger": {
            "budget": c.budget,
            "kind": c.kind,
            "metric": c.metric,
            "subject": c.subject,
            "threshold": c.threshold,
            "period": c.period.isoformat(),
            "at": c.at.isoformat(),
            "spent_usd": str(c.spent_usd),
            "limit_usd": str(c.limit_usd),
            "warn_at": None if c.warn_at is None else str(c.warn_at),
            "used": c.used,
            "burn_usd_per_hour": None if c.burn_usd_per_hour is None else str(c.burn_usd_per_hour),
            "limit_reached_at": None
            if c.limit_reached_at is None
            else c.limit_reached_at.isoformat(),
        },
    }
