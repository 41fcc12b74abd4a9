"""What a routing policy did: its treatment arm against its holdout, session-clustered.

A policy (:mod:`ledger.policies`) assigns whole sessions to an arm, so the unit of
randomisation is the session: every rate here is a ratio of per-session sums, and
its interval comes from the spread of those sums across sessions (a cluster-robust,
delta-method standard error), never from treating each call as independent. The
difference of the arms is what the policy caused, up to that interval.

The SQL reads the analytics copy's ``token_usage`` (its ``policy_id`` and ``arm``
columns); the statistics are pure functions of its per-session sums.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import pandas as pd  # type: ignore[import-untyped]

#: Per session of a policy's experiment: its arm and the sums its rates are made of.
#: Response-cache hits are no attempt; costs unknown are left out of the cost sums
#: (and their calls out of the cost denominator), never taken as 0.
SESSION_SUMS: Final = """
SELECT
    arm,
    actor_id,
    coalesce(session_id || chr(31) || coalesce(actor_id, ''), call_id) AS unit,
    count(*) AS attempts,
    count(*) FILTER (WHERE status = 'error' AND coalesce(error_type, '') <> 'abandoned')
        AS errors,
    count(cost_usd) AS costed,
    coalesce(sum(CAST(cost_usd AS DOUBLE)), 0) AS cost_usd,
    coalesce(sum(input_tokens) FILTER (WHERE status = 'ok' AND usage_reported), 0)
        AS input_tokens,
    coalesce(sum(cache_read_tokens) FILTER (WHERE status = 'ok' AND usage_reported), 0)
        AS cache_read_tokens
FROM token_usage
WHERE policy_id = $policy AND arm IS NOT NULL AND NOT response_cache_hit AND attempt >= 1
GROUP BY ALL
"""

#: Served latency per arm, and per arm and agent, for its p95 (no interval: a quantile's
#: is not worth its cost here); ``by_agent`` tells the two groupings apart.
P95_BY_ARM: Final = """
SELECT arm, actor_id, grouping(actor_id) = 0 AS by_agent,
    quantile_cont(latency_ms, 0.95) AS p95_latency_ms
FROM token_usage
WHERE policy_id = $policy AND arm IS NOT NULL AND status = 'ok' AND NOT response_cache_hit
GROUP BY GROUPING SETS ((arm), (arm, actor_id))
"""

#: Two-sided 95 % normal quantile.
Z95: Final = 1.959963984540054


@dataclass(frozen=True, slots=True)
class SessionSums:
    """One session's sums (a row of :data:`SESSION_SUMS`)."""

    arm: str
    attempts: int
    errors: int
    costed: int
    cost_usd: float
    input_tokens: int
    cache_read_tokens: int
    actor_id: str | None = None


@dataclass(frozen=True, slots=True)
class Estimate:
    """A ratio of sums over sessions and its 95 % interval (None: too few sessions)."""

    value: float | None
    low: float | None
    high: float | None

    @property
    def excludes_zero(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)


@dataclass(frozen=True, slots=True)
class ArmSummary:
    arm: str
    sessions: int
    attempts: int
    cost_per_attempt: Estimate
    error_rate: Estimate
    token_hit_rate: Estimate
    p95_latency_ms: float | None


@dataclass(frozen=True, slots=True)
class Effect:
    """Treatment minus holdout, each figure with its interval."""

    treatment: ArmSummary
    holdout: ArmSummary
    cost_per_attempt: Estimate
    error_rate: Estimate
    token_hit_rate: Estimate


#: What an experiment shows so far (:func:`outcome`).
Outcome = Literal["measuring", "no effect yet", "better", "worse"]


def outcome(found: Effect) -> Outcome:
    """``worse`` when the treatment's cost per attempt or error rate is higher than the
    holdout's beyond its interval; ``better`` when its cost per attempt is lower beyond
    it (errors not worse); ``measuring`` until both arms have sessions enough for an
    interval on cost; else ``no effect yet``."""
    cost, errors = found.cost_per_attempt, found.error_rate
    higher = [e for e in (cost, errors) if e.excludes_zero and e.value is not None and e.value > 0]
    if higher:
        return "worse"
    if cost.value is None:
        return "measuring"
    if cost.excludes_zero and cost.value < 0:
        return "better"
    return "no effect yet"


def ratio(numerators: Sequence[float], denominators: Sequence[float]) -> tuple[float, float] | None:
    """sum(num) / sum(den) over clusters and the variance of that ratio (delta method,
    clusters independent); None without two clusters with a denominator."""
    pairs = [(n, d) for n, d in zip(numerators, denominators, strict=True) if d > 0]
    k = len(pairs)
    total = sum(d for _, d in pairs)
    if k < 2 or total <= 0:
        return None
    r = sum(n for n, _ in pairs) / total
    mean_d = total / k
    residual = sum((n - r * d) ** 2 for n, d in pairs)
    variance = residual / (k - 1) / k / mean_d**2
    return r, variance


def _interval(found: tuple[float, float] | None) -> Estimate:
    if found is None:
        return Estimate(None, None, None)
    value, variance = found
    half = Z95 * math.sqrt(variance)
    return Estimate(value, value - half, value + half)


def _difference(a: tuple[float, float] | None, b: tuple[float, float] | None) -> Estimate:
    if a is None or b is None:
        return Estimate(None, None, None)
    return _interval((a[0] - b[0], a[1] + b[1]))  # independent arms: variances add


def _ratios(sessions: Sequence[SessionSums]) -> dict[str, tuple[float, float] | None]:
    return {
        "cost_per_attempt": ratio([s.cost_usd for s in sessions], [s.costed for s in sessions]),
        "error_rate": ratio([s.errors for s in sessions], [s.attempts for s in sessions]),
        "token_hit_rate": ratio(
            [s.cache_read_tokens for s in sessions], [s.input_tokens for s in sessions]
        ),
    }


def effect(sessions: Sequence[SessionSums], p95: dict[str, float]) -> Effect:
    """The arms' figures and the policy's effect (treatment - holdout) on each."""
    by_arm = {arm: [s for s in sessions if s.arm == arm] for arm in ("treatment", "holdout")}
    ratios = {arm: _ratios(members) for arm, members in by_arm.items()}
    summaries = {
        arm: ArmSummary(
            arm=arm,
            sessions=len(members),
            attempts=sum(s.attempts for s in members),
            cost_per_attempt=_interval(ratios[arm]["cost_per_attempt"]),
            error_rate=_interval(ratios[arm]["error_rate"]),
            token_hit_rate=_interval(ratios[arm]["token_hit_rate"]),
            p95_latency_ms=p95.get(arm),
        )
        for arm, members in by_arm.items()
    }
    treated, held = ratios["treatment"], ratios["holdout"]
    return Effect(
        treatment=summaries["treatment"],
        holdout=summaries["holdout"],
        cost_per_attempt=_difference(treated["cost_per_attempt"], held["cost_per_attempt"]),
        error_rate=_difference(treated["error_rate"], held["error_rate"]),
        token_hit_rate=_difference(treated["token_hit_rate"], held["token_hit_rate"]),
    )


def effects_by_agent(
    sessions: Sequence[SessionSums], p95: dict[tuple[str | None, str], float]
) -> dict[str | None, Effect]:
    """:func:`effect` per agent (``actor_id``; None for calls without one): a session
    belongs to one agent, so each agent's arms are still whole sessions.
    ``p95`` is keyed by (agent, arm)."""
    agents = sorted({s.actor_id for s in sessions}, key=lambda a: (a is None, a or ""))
    return {
        agent: effect(
            [s for s in sessions if s.actor_id == agent],
            {arm: v for (a, arm), v in p95.items() if a == agent},
        )
        for agent in agents
    }


#: ``(sessions' sums, p95 by arm, p95 by (agent, arm))`` of one policy.
Sums = tuple[list[SessionSums], dict[str, float], dict[tuple[str | None, str], float]]


def read_sums(read: Callable[[str, dict[str, Any]], pd.DataFrame], policy_id: int) -> Sums:
    """Policy ``policy_id``'s session sums and p95s, read with ``read(sql, params)``."""
    params = {"policy": policy_id}

    def agent(value: Any) -> str | None:
        return None if pd.isna(value) else str(value)

    sessions = [
        SessionSums(
            arm=str(r.arm),
            attempts=int(r.attempts),
            errors=int(r.errors),
            costed=int(r.costed),
            cost_usd=float(r.cost_usd),
            input_tokens=int(r.input_tokens),
            cache_read_tokens=int(r.cache_read_tokens),
            actor_id=agent(r.actor_id),
        )
        for r in read(SESSION_SUMS, params).itertuples(index=False)
    ]
    by_arm: dict[str, float] = {}
    by_agent: dict[tuple[str | None, str], float] = {}
    for r in read(P95_BY_ARM, params).itertuples(index=False):
        if r.by_agent:
            by_agent[agent(r.actor_id), str(r.arm)] = float(r.p95_latency_ms)
        else:
            by_arm[str(r.arm)] = float(r.p95_latency_ms)
    return sessions, by_arm, by_agent
