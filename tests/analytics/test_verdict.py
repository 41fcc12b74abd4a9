"""The provider.order verdict on hand-built models (min_samples = 50 to keep them small).

Figures worked out by hand (z = 1.96):
- Wilson interval of 20 errors in 80 attempts: [0.16806, 0.35485]; of 0 in 60: [0, 0.06017].
- Order-statistic interval of the p95 of 100 latencies: ranks floor(95 - 1.96·√4.75) = 90
  and ceil(95 + 1.96·√4.75) = 100, so [x(90), x(100)].
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.analytics.builders import failed, insert_rows, open_analytics, served

COST = {"input_tokens": 1000, "cost_usd": Decimal("0.001")}  # $1 per million input tokens


def pinned_sessions(
    model: str, upstream: str, sessions: int, calls: int, **values: Any
) -> list[dict[str, Any]]:
    rows = []
    for s in range(sessions):
        who = {"session_id": f"{model}-{s}", "actor_id": "agent", "session_key": f"k{s}"}
        rows += [
            served(s + c, upstream, requested_model=model, **{**who, **values})
            for c in range(calls)
        ]
    return rows


def unpinned(model: str, upstream: str, n: int, **values: Any) -> list[dict[str, Any]]:
    return [served(i, upstream, requested_model=model, **values) for i in range(n)]


def errors(model: str, upstream: str, n: int) -> list[dict[str, Any]]:
    return [failed(i, upstream, requested_model=model) for i in range(n)]


def verdict_ledger() -> list[dict[str, Any]]:
    cached = {
        "input_tokens": 1000,
        "cache_read_tokens": 900,
        "cost_usd": Decimal("0.00028"),
        "session_key": "k",
    }
    return [
        # bad-pin: P errs 20/80, Q 0/60, same latency and price -> warranted on errors
        *pinned_sessions("bad-pin", "P", 30, 2, **COST),
        *errors("bad-pin", "P", 20),
        *unpinned("bad-pin", "Q", 60, **COST),
        # good-pin: P errs 1/61 -> not worse with confidence
        *pinned_sessions("good-pin", "P", 30, 2, **COST),
        *errors("good-pin", "P", 1),
        *unpinned("good-pin", "Q", 60, **COST),
        # slow-pin: P serves in 1001..1100 ms, Q in 1..100 ms -> warranted on p95
        *[
            served(
                i,
                "P",
                requested_model="slow-pin",
                session_id=f"slow-{i // 2}",
                session_key="k",
                latency_ms=1001.0 + i,
                **COST,
            )
            for i in range(100)
        ],
        *[
            served(i, "Q", requested_model="slow-pin", latency_ms=1.0 + i, **COST)
            for i in range(100)
        ],
        # cache-pin: P errs like bad-pin but its 90 % cache hit rate keeps it at $0.28/Mtok;
        # without stickiness (no keyless sample: hit rate 0) Q would cost 0.28/0.19 = $1.47
        *pinned_sessions("cache-pin", "P", 30, 2, **cached),
        *errors("cache-pin", "P", 20),
        *unpinned("cache-pin", "Q", 60, **cached),
        # thin: five attempts
        *pinned_sessions("thin", "P", 1, 5, **COST),
    ]


@pytest.fixture
def verdicts(ledger_url: str, tmp_path: Path) -> pd.DataFrame:
    insert_rows(ledger_url, verdict_ledger())
    with open_analytics(ledger_url, tmp_path, min_samples=50) as analytics:
        return analytics.provider_order_verdict().set_index("requested_model")


def test_a_pinned_upstream_that_errs_more_with_confidence_is_warranted(
    verdicts: pd.DataFrame,
) -> None:
    bad = verdicts.loc["bad-pin"]
    assert (bad.verdict, bad.pinned_upstream, bad.best_upstream) == ("warranted", "P", "Q")
    assert (bad.pinned_error_low, bad.pinned_error_high) == pytest.approx(
        (0.16806, 0.35485), abs=1e-5
    )
    assert (bad.best_error_low, bad.best_error_high) == pytest.approx((0.0, 0.06017), abs=1e-5)
    assert bool(bad.errors_worse) and not bool(bad.latency_worse) and not bool(bad.cost_worse)
    assert "25.0%" in bad.reason and "0.0%" in bad.reason and "warranted" in bad.reason


def test_a_pinned_upstream_within_the_margins_is_not_warranted(verdicts: pd.DataFrame) -> None:
    good = verdicts.loc["good-pin"]
    assert (good.verdict, good.pinned_upstream, good.best_upstream) == ("not_warranted", "P", "Q")
    assert not bool(good.errors_worse)
    assert "not warranted" in good.reason


def test_a_slow_pinned_upstream_is_warranted_on_p95_latency(verdicts: pd.DataFrame) -> None:
    slow = verdicts.loc["slow-pin"]
    assert slow.verdict == "warranted" and bool(slow.latency_worse)
    assert (slow.pinned_p95_low_ms, slow.pinned_p95_high_ms) == (1090.0, 1100.0)
    assert (slow.best_p95_low_ms, slow.best_p95_high_ms) == (90.0, 100.0)


def test_losing_the_cache_can_outweigh_a_worse_upstream(verdicts: pd.DataFrame) -> None:
    cache = verdicts.loc["cache-pin"]
    assert cache.verdict == "not_warranted"
    assert bool(cache.errors_worse) and not bool(cache.affordable)
    assert cache.pinned_cost_per_mtok == pytest.approx(0.28)
    assert cache.best_projected_cost_per_mtok == pytest.approx(0.28 / 0.19)
    assert "losing the cache" in cache.reason


def test_too_little_data_gives_insufficient_data(verdicts: pd.DataFrame) -> None:
    thin = verdicts.loc["thin"]
    assert thin.verdict == "insufficient_data"
    assert thin.reason.startswith("Pinned upstream P has 5 attempts")
