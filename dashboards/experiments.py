"""The experiments strip: each routing policy running (``ledger policy``) and what it did.

Shown on the landing page under the verdicts, one line per active policy: the
model, what it changes, since when, the sessions in each arm and the measured
effect on cost per attempt with its 95 % interval, then the outcome in the words
``ledger policy status`` uses (measuring, no effect yet, better, worse). A worse
policy is an error box: roll it back. Every string from the ledger is shown as
plain text (:func:`dashboards.fmt.plain`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

import streamlit as st

from dashboards import fmt
from ledger.analytics.read.experiment import Effect, Estimate, Outcome, outcome
from ledger.policies import Policy

#: outcome -> what the strip says (as ``ledger policy status`` does).
SAID: Final[dict[Outcome, str]] = {
    "measuring": "measuring: not enough sessions in both arms yet",
    "no effect yet": "no effect on cost per attempt yet (its interval spans zero)",
    "better": "better: the treatment costs less per attempt, beyond its interval",
    "worse": "worse than the holdout beyond its interval: consider `ledger policy stop`",
}


@dataclass(frozen=True)
class ExperimentLine:
    """What the strip shows for one policy; ``outcome`` picks the box."""

    title: str
    detail: str
    outcome: Outcome


def _change(policy: Policy) -> str:
    if policy.kind == "session_key":
        return "the sticky key (holdout sent without it)"
    return "provider " + json.dumps(dict(policy.provider), ensure_ascii=True)


def _cost(e: Estimate) -> str:
    if e.value is None or e.low is None or e.high is None:
        return "cost per attempt: not measured yet"
    return f"cost per attempt {e.value:+.6f} USD (95 %: {e.low:+.6f} to {e.high:+.6f})"


def line(policy: Policy, found: Effect) -> ExperimentLine:
    """The strip's line for ``policy`` and its measured ``found`` effect."""
    arms = f"{found.treatment.sessions:,} treatment / {found.holdout.sessions:,} holdout sessions"
    return ExperimentLine(
        title=(
            f"Experiment {policy.id} on {fmt.plain(policy.requested_model)} since "
            f"{policy.created_at:%Y-%m-%d %H:%M} UTC: {fmt.plain(_change(policy))}"
        ),
        detail=f"{arms} · {_cost(found.cost_per_attempt)} · {SAID[outcome(found)]}",
        outcome=outcome(found),
    )


def strip(found: list[tuple[Policy, Effect]]) -> None:
    """One box per active policy; nothing when none runs."""
    if not found:
        return
    st.subheader("Experiments running")
    for policy, effect in found:
        shown = line(policy, effect)
        box = {"worse": st.error, "better": st.success}.get(shown.outcome, st.info)
        box(f"{shown.title}  \n{shown.detail}")
