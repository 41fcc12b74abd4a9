"""The provider routing verdict on built scenario ledgers, each answer derived by hand.

One ledger holds every scenario (min_samples = 50 keeps them small). Every
request goes to OpenRouter (served rows: 1,000 input tokens, $0.001 unless
said otherwise: $1 per Mtok input) except the direct model. The ledger spans
exactly one day (its first and last rows are the direct model's, at minutes 0
and 1,440), so monthly_effect_usd = 30 x the change over the ledger.

Within each scenario every session of an upstream looks alike (same attempts,
errors and latencies), so the between-session variance is 0, the intraclass
correlation is clamped to 0 and the design effect is 1: the intervals are the
plain Wilson / order-statistic ones (z = 1.96, z² = 3.8416):
- Wilson, 20 errors in 100: centre (0.2 + 0.019208) / 1.038416 = 0.211099,
  half 1.96 / 1.038416 · √(0.0016 + 0.00009604) = 0.077733 → [0.13337, 0.28883].
- Wilson, 0 errors in 180: upper 3.8416 / 183.8416 = 0.020896; in 100: 0.036995.
- Equal latencies: the p95 interval is [x, x].
"""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from ledger.analytics.read.verdict import Verdict, from_row
from tests.analytics.builders import failed, insert_rows, open_analytics, served

ROW = {"input_tokens": 1000, "cost_usd": Decimal("0.001")}  # $1 per Mtok input
CHEAP = {"input_tokens": 1000, "cost_usd": Decimal("0.0002")}  # $0.20 per Mtok input
DEARER = {"input_tokens": 1000, "cost_usd": Decimal("0.0015")}  # $1.50 per Mtok input
PRICEY = {"input_tokens": 1000, "cost_usd": Decimal("0.002")}  # $2 per Mtok input
DAY_MIN = 1440.0


def sessions(
    model: str,
    upstream: str,
    count: int,
    *,
    served_per: int,
    failed_per: int = 0,
    latency_ms: float = 1000.0,
    start: float = 1.0,
    values: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """``count`` keyed sessions, each with ``served_per`` served and ``failed_per`` failed
    attempts on ``upstream`` (failures name it), one minute apart."""
    rows = []
    for s in range(count):
        who = {
            "requested_model": model,
            "session_id": f"{model}-{upstream}-{s}",
            "actor_id": "agent",
            "session_key": f"app:{model}-{s}:agent",
        }
        minute = start + s
        for c in range(served_per):
            rows.append(served(minute + c / 100, upstream, latency_ms=latency_ms,
                               **who, **(values or ROW)))  # fmt: skip
        for c in range(failed_per):
            rows.append(failed(minute + 0.5 + c / 100, upstream, **who))
    return rows


def loose(model: str, upstream: str, n: int, latency_ms: float) -> list[dict[str, Any]]:
    return [served(100 + i, upstream, requested_model=model, latency_ms=latency_ms, **ROW)
            for i in range(n)]  # fmt: skip


def scenario_ledger() -> list[dict[str, Any]]:
    direct = {"requested_provider": "openai", "provider": "openai", "requested_model": "direct"}
    return [
        # minority: Amazon Bedrock holds 5 of 50 pinned sessions (10 %), errs 20/100 and
        # serves in 3 s; Anthropic holds 45, errs 0/180, serves in 1 s
        *sessions("minority", "Amazon Bedrock", 5, served_per=16, failed_per=4,
                  latency_ms=3000.0),
        *sessions("minority", "Anthropic", 45, served_per=4),
        # majority: Amazon Bedrock holds 30 of 50 (60 %), errs 60/300; Anthropic 20 sessions,
        # Google (Vertex's display name) 60 loose calls at 1.5 s
        *sessions("majority", "Amazon Bedrock", 30, served_per=8, failed_per=2,
                  latency_ms=3000.0),
        *sessions("majority", "Anthropic", 20, served_per=5),
        *loose("majority", "Google", 60, 1500.0),
        # alike: two upstreams, the same on every figure
        *sessions("alike", "Anthropic", 25, served_per=4),
        *sessions("alike", "Azure", 25, served_per=4),
        # thin: one session of five calls
        *sessions("thin", "Anthropic", 1, served_per=5),
        # cheap-slow: DeepInfra (40 % of sessions) is 1.4 s vs 1.0 s but $0.20 vs $1 per Mtok
        *sessions("cheap-slow", "DeepInfra", 20, served_per=5, latency_ms=1400.0, values=CHEAP),
        *sessions("cheap-slow", "Together", 30, served_per=5),
        # unpinned-pricey: Parasail (10 of 50 sessions) errs 20/70; Together holds the other
        # 40 at $1/Mtok; Novita served 100 loose calls at $5/Mtok and holds no session
        *sessions("unpinned-pricey", "Parasail", 10, served_per=5, failed_per=2),
        *sessions("unpinned-pricey", "Together", 40, served_per=5),
        *[served(200 + i, "Novita", requested_model="unpinned-pricey", latency_ms=1000.0,
                 input_tokens=1000, cost_usd=Decimal("0.005")) for i in range(100)],
        # two-worse: Parasail (10 sessions, 1.1 s, $2/Mtok) is judged against the fastest,
        # Fireworks (10, 0.9 s, $1.50), which is judged against Baseten (40, 1.0 s, $1):
        # both are dearer within the latency margin, so both are ignored
        *sessions("two-worse", "Parasail", 10, served_per=5, latency_ms=1100.0, values=PRICEY),
        *sessions("two-worse", "Fireworks", 10, served_per=5, latency_ms=900.0, values=DEARER),
        *sessions("two-worse", "Baseten", 40, served_per=5),
        # direct: OpenAI with an Anthropic fallback, not routed by OpenRouter; it spans the day
        *[served(minute, None, **direct, **ROW) for minute in (0.0, 720.0, DAY_MIN)],
        served(10, None, **{**direct, "provider": "anthropic"}, **ROW),
    ]  # fmt: skip


@pytest.fixture
def verdicts(ledger_url: str, tmp_path: Path) -> pd.DataFrame:
    insert_rows(ledger_url, scenario_ledger())
    with open_analytics(ledger_url, tmp_path, min_samples=50) as analytics:
        frame = analytics.provider_order_verdict()
        again = analytics.provider_order_verdict()
    pd.testing.assert_frame_equal(frame, again)  # the same rows in the same order
    assert list(frame["requested_model"]) == sorted(frame["requested_model"])
    return frame.set_index("requested_model")


def typed(verdicts: pd.DataFrame, model: str) -> Verdict:
    return from_row({**verdicts.loc[model].to_dict(), "requested_model": model})


def test_a_bad_minority_upstream_is_ignored(verdicts: pd.DataFrame) -> None:
    row = verdicts.loc["minority"]
    assert (row.verdict, row.pinned_upstream, row.best_upstream) == (
        "warranted", "Amazon Bedrock", "Anthropic",
    )  # fmt: skip
    assert json.loads(row.recommendation) == {"ignore": ["amazon-bedrock"]}
    assert (row.pinned_error_low, row.pinned_error_high) == pytest.approx(
        (0.13337, 0.28883), abs=1e-5
    )
    assert row.best_error_high == pytest.approx(0.020896, abs=1e-6)
    assert (row.pinned_p95_low_ms, row.pinned_p95_high_ms) == (3000.0, 3000.0)
    assert bool(row.errors_worse) and bool(row.latency_worse) and not bool(row.cost_worse)
    assert row.sessions_affected_share == pytest.approx(0.10)
    # Bedrock's 80 served calls ($0.08) move to Anthropic at $1/Mtok ($0.08); its 20
    # errors above Anthropic's 0 % are retries avoided at the model's $0.001 per served
    # call: -$0.02 over the day, -$0.60 per 30 days
    assert row.monthly_effect_usd == Decimal("-0.6")
    assert row.headline == (
        "Ignore Amazon Bedrock (vs Anthropic: 20.0% errors vs 0.0%, p95 3.0 s vs 1.0 s), "
        "on 10% of sessions"
    )
    v = typed(verdicts, "minority")
    assert (v.action, v.ignore_error_rate, v.ignore_cost_per_mtok) == ("ignore", 0.0, 1.0)
    assert v.cost_change_usd == pytest.approx(-0.02)
    assert "-$0.60 per 30 days" in row.reason  # the golden figure a lead reads


def test_a_bad_majority_upstream_orders_the_best_first(verdicts: pd.DataFrame) -> None:
    row = verdicts.loc["majority"]
    assert (row.verdict, row.pinned_upstream, row.best_upstream) == (
        "warranted", "Amazon Bedrock", "Anthropic",
    )  # fmt: skip
    # Anthropic and Google both err 0 %; Anthropic's p95 (1 s) beats Google's (1.5 s)
    assert json.loads(row.recommendation) == {
        "order": ["anthropic", "google-vertex"],
        "allow_fallbacks": True,
    }
    assert row.sessions_affected_share == pytest.approx(0.6)
    # all 400 served calls ($0.40) on Anthropic at $1/Mtok (no cache to lose: $0.40);
    # 60 retries avoided at $0.001: -$0.06 a day, -$1.80 per 30 days
    assert row.monthly_effect_usd == Decimal("-1.8")
    v = typed(verdicts, "majority")
    assert v.action == "order" and v.judged is not None
    assert (v.judged.upstream, v.judged.judged_against) == ("Amazon Bedrock", "Anthropic")
    assert (v.judged.errors_worse, v.judged.error_rate) == (True, pytest.approx(0.2))
    # Anthropic holds 20 of the 50 pinned sessions today; all of them go to it
    assert (v.order_error_rate, v.order_pinned_share) == (0.0, pytest.approx(0.4))
    # one unit throughout: the figures in seconds, as the headline says them
    assert "p95 3.00 s (CI 3.00-3.00 s)" in row.reason and " ms" not in row.reason


def test_upstreams_alike_are_not_warranted(verdicts: pd.DataFrame) -> None:
    row = verdicts.loc["alike"]
    assert row.verdict == "not_warranted"
    assert pd.isna(row.recommendation) and pd.isna(row.monthly_effect_usd)
    assert row.sessions_affected_share == 0
    assert row.headline == (
        "Keep routing: no pinned upstream is worse beyond the margins"
        " (errors +2.0 points, p95 +25%, price +10%)"
    )
    assert (row.judged_upstreams, row.worse_upstreams) == ("Anthropic, Azure", "")


def test_thin_data_is_insufficient(verdicts: pd.DataFrame) -> None:
    row = verdicts.loc["thin"]
    assert row.verdict == "insufficient_data" and pd.isna(row.recommendation)
    v = typed(verdicts, "thin")
    assert (v.pinned_attempts, v.min_samples, v.pinned_enough) == (5, 50, False)
    assert row.headline == "Not enough data: Anthropic has 5 attempts, 50 needed to judge"


def test_a_direct_provider_model_does_not_apply(verdicts: pd.DataFrame) -> None:
    row = verdicts.loc["direct"]
    assert row.verdict == "does_not_apply"
    assert pd.isna(row.pinned_upstream) and pd.isna(row.recommendation)
    assert row.reason == (
        "direct is not routed by OpenRouter (its attempts went to anthropic, openai), "
        "so provider routing (order, ignore, sort) does not apply."
    )


def test_sessions_move_only_to_upstreams_that_hold_pinned_sessions(
    verdicts: pd.DataFrame,
) -> None:
    row = verdicts.loc["unpinned-pricey"]
    # Parasail's sessions go where sticky routing puts sessions: to Together ($1/Mtok,
    # as Parasail), not to Novita, which holds none whatever its loose calls
    assert row.verdict == "warranted" and bool(row.affordable)
    assert row.cost_change_share <= 0  # counting Novita's $5/Mtok made it +200%
    assert json.loads(row.recommendation) == {"ignore": ["parasail"]}


def test_a_cheap_slightly_slower_upstream_is_kept_and_the_trade_off_stated(
    verdicts: pd.DataFrame,
) -> None:
    row = verdicts.loc["cheap-slow"]
    # DeepInfra's p95 1.4 s > 1.0 s x 1.25, so it is worse; moving its 100 calls ($0.02)
    # to Together at $1/Mtok costs $0.10: +$0.08, +400 % > the 10 % allowed
    assert row.verdict == "not_warranted" and pd.isna(row.recommendation)
    assert bool(row.latency_worse) and not bool(row.affordable)
    assert row.cost_change_share == pytest.approx(4.0)
    assert row.monthly_effect_usd == Decimal("2.4")
    assert row.headline == (
        "Keep routing: leaving DeepInfra (vs Together: p95 1.4 s vs 1.0 s) would cost +400% "
        "on 40% of sessions"
    )
    v = typed(verdicts, "cheap-slow")
    assert (v.action, v.affordable, v.max_cost_increase) == ("ignore", False, 0.1)
    # differs in latency, not errors: the reason offers provider.sort = "latency"
    assert v.pinned_worse and v.latency_worse and not v.errors_worse
    assert 'provider.sort = "latency"' in row.reason


def test_each_ignored_upstream_is_named_with_what_it_was_judged_against(
    verdicts: pd.DataFrame,
) -> None:
    row = verdicts.loc["two-worse"]
    assert row.verdict == "warranted"
    assert json.loads(row.recommendation) == {"ignore": ["parasail", "fireworks"]}
    # Parasail's comparison, Fireworks, is dropped too: the headline must not read as if
    # $1.50 were where the sessions go
    assert row.headline == (
        "Ignore Parasail (vs Fireworks: $2.00 vs $1.50 per Mtok input) and "
        "Fireworks (vs Baseten: $1.50 vs $1.00 per Mtok input), on 33% of sessions"
    )
    v = typed(verdicts, "two-worse")
    assert [(j.upstream, j.judged_against, j.cost_worse) for j in v.worse_judged] == [
        ("Parasail", "Fireworks", True),
        ("Fireworks", "Baseten", True),
    ]
    assert "Fireworks is also worse ($1.50 vs $1.00 per Mtok input) than Baseten." in row.reason
    # their 100 calls ($0.10 + $0.075) move to Baseten at $1/Mtok ($0.10): -$0.075 a day
    assert row.monthly_effect_usd == Decimal("-2.25")
