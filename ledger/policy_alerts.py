"""The webhook alert that an applied routing policy is worse than its holdout.

Posted once per policy (``routing_policies.worse_alerted_at`` is claimed first) by
``ledger policy check --notify URL``, in the Slack-compatible shape the budget
alerts use (:mod:`ledger.budgets.alerts`), with a machine-readable copy under
``ledger``. Model names are data: escaped as Slack's format requires.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy import Engine

from ledger.analytics.read.experiment import Effect, Estimate
from ledger.budgets.alerts import COLORS, slack_escape
from ledger.budgets.notify import DEFAULT_BACKOFF_S, DEFAULT_RETRIES, DEFAULT_TIMEOUT_S, post
from ledger.policies import Policy, claim_worse_alert, release_worse_alert


@dataclass(frozen=True, slots=True)
class PolicyDelivery:
    """What became of one worse policy's alert: ``sent``, ``already sent`` or ``failed``."""

    policy: Policy
    state: str
    error: str | None = None


def _figure(e: Estimate, fmt: str) -> str:
    if e.value is None or e.low is None or e.high is None:
        return "unknown"
    return f"{e.value:{fmt}} ({e.low:{fmt}} to {e.high:{fmt}})"


def message(policy: Policy, found: Effect, at: dt.datetime) -> dict[str, Any]:
    """The Slack-compatible body saying ``policy`` is worse, with its measured effect."""
    model = slack_escape(policy.requested_model)
    text = (
        f"Routing policy {policy.id} on {model} is worse than its holdout beyond its "
        f"95 % interval: consider `ledger policy stop {model}`"
    )
    fields = [
        ("cost per attempt, treatment - holdout (USD)", _figure(found.cost_per_attempt, "+.6f")),
        ("error rate, treatment - holdout", _figure(found.error_rate, "+.2%")),
        (
            "sessions (treatment / holdout)",
            f"{found.treatment.sessions} / {found.holdout.sessions}",
        ),
        ("applied", f"{policy.created_at:%Y-%m-%d %H:%M} UTC by {slack_escape(policy.created_by)}"),
    ]
    return {
        "text": text,
        "attachments": [
            {
                "color": COLORS["limit"],
                "fields": [{"title": t, "value": v, "short": False} for t, v in fields],
                "ts": int(at.timestamp()),
            }
        ],
        "ledger": {
            "policy_id": policy.id,
            "requested_model": policy.requested_model,
            "kind": policy.kind,
            "provider": dict(policy.provider),
            "outcome": "worse",
            "cost_per_attempt": [
                found.cost_per_attempt.value,
                found.cost_per_attempt.low,
                found.cost_per_attempt.high,
            ],
            "error_rate": [found.error_rate.value, found.error_rate.low, found.error_rate.high],
            "at": at.isoformat(),
        },
    }


def notify_worse(
    engine: Engine,
    worse: list[tuple[Policy, Effect]],
    url: str,
    *,
    retries: int = DEFAULT_RETRIES,
    backoff_s: float = DEFAULT_BACKOFF_S,
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
) -> list[PolicyDelivery]:
    """Post each worse policy's alert unless it was posted before; what became of each."""
    deliveries = []
    with httpx.Client(timeout=DEFAULT_TIMEOUT_S) as client:
        for policy, found in worse:
            at = now()
            if not claim_worse_alert(engine, policy.id, at):
                deliveries.append(PolicyDelivery(policy, "already sent"))
                continue
            delivered, _attempts, error = post(
                client, url, message(policy, found, at), retries=retries, backoff_s=backoff_s
            )
            if delivered:
                deliveries.append(PolicyDelivery(policy, "sent"))
            else:
                release_worse_alert(engine, policy.id)
                deliveries.append(PolicyDelivery(policy, "failed", error))
    return deliveries
