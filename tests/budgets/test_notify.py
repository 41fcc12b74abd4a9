"""The alert state in the ledger database: claims, confirmation, release, stale claims."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from sqlalchemy import Engine

from ledger.budgets.alerts import Crossing
from ledger.budgets.notify import CLAIM_TTL, claim, confirm, release, sent_alerts, webhook_host

NOW = dt.datetime(2026, 11, 30, 10, 0, tzinfo=dt.UTC)
CROSSING = Crossing(
    budget="daily",
    kind="agent_day",
    metric="limit_usd",
    subject=None,
    threshold="warning",
    period=NOW.date(),
    spent_usd=Decimal("8.5"),
    limit_usd=Decimal(10),
    warn_at=Decimal("0.8"),
    at=NOW,
)


def test_one_claim_per_budget_threshold_and_period(engine_for: Engine) -> None:
    assert claim(engine_for, CROSSING, NOW)
    assert not claim(engine_for, CROSSING, NOW)  # being sent by the first claimant
    other = Crossing(**{**_fields(CROSSING), "threshold": "limit"})
    assert claim(engine_for, other, NOW)
    next_day = Crossing(**{**_fields(CROSSING), "period": NOW.date() + dt.timedelta(days=1)})
    assert claim(engine_for, next_day, NOW)
    confirm(engine_for, CROSSING, NOW)
    assert not claim(engine_for, CROSSING, NOW + 2 * CLAIM_TTL)  # sent: never again
    assert [(a["threshold"], a["subject"], a["spent_usd"]) for a in sent_alerts(engine_for)] == [
        ("warning", "", Decimal("8.5000000000"))
    ]


def test_a_released_claim_can_be_taken_again(engine_for: Engine) -> None:
    assert claim(engine_for, CROSSING, NOW)
    release(engine_for, CROSSING)
    assert claim(engine_for, CROSSING, NOW)


def test_a_claim_left_by_a_dead_run_is_taken_over_after_the_ttl(engine_for: Engine) -> None:
    assert claim(engine_for, CROSSING, NOW)
    assert not claim(engine_for, CROSSING, NOW + CLAIM_TTL / 2)
    assert claim(engine_for, CROSSING, NOW + 2 * CLAIM_TTL)


def test_only_scheme_and_host_of_a_webhook_are_shown() -> None:
    assert webhook_host("https://hooks.slack.com/services/T0/B0/XYZ") == "https://hooks.slack.com"


def _fields(c: Crossing) -> dict[str, object]:
    return {name: getattr(c, name) for name in Crossing.__slots__}  # type: ignore[attr-defined]
