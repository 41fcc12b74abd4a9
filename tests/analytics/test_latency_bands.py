"""The latency bands sync keeps: the p50, the p95 and its interval read from them are exact.

Groups above ``latency_bands.MIN_ROWS`` latencies keep only bands around their
p50 and p95; these tests grow such groups across syncs (their latencies drifting, rows
deleted and changed, a z too large for the band) and check the stored views
against the same views computed from every row, and the interval by hand.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

from sqlalchemy import delete, update

from ledger.analytics import Analytics, AnalyticsSettings
from ledger.analytics.models.views import Filters, filtered_query
from ledger.analytics.state import latency_bands
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from tests.analytics.builders import insert_rows, served
from tests.analytics.test_incremental import assert_same_frames

VIEWS = ("upstream_p95_intervals", "upstream_scorecard", "provider_order_verdict")


def _rows(rng: random.Random, n: int, minute0: float, scale: float) -> list[dict[str, object]]:
    """Served attempts of upstreams A (four in five) and B, in 150 sessions."""
    return [
        served(
            minute0 + i / 100,
            "A" if rng.random() < 0.8 else "B",
            session_id=f"s{rng.randrange(150)}",
            latency_ms=round(rng.gammavariate(2, 400) * scale, 3),
        )
        for i in range(n)
    ]


def _assert_exact(analytics: Analytics) -> None:
    everything = Filters().parameters()
    for view in VIEWS:
        stored = analytics.sql(f'SELECT * FROM "{view}"')
        assert_same_frames(stored, analytics.sql(filtered_query(view), everything), view)


def _kept_share(analytics: Analytics) -> float:
    """The largest share of all latencies one quantile's bands hold."""
    kept = analytics.sql(f"SELECT q, count(*) AS k FROM {latency_bands.BAND} GROUP BY q ORDER BY q")
    (total,) = analytics.sql("SELECT count(*) AS n FROM state_latency").iloc[0]
    assert list(kept.q) == list(latency_bands.QUANTILES)
    return float(kept.k.max()) / float(total)


def _interval_by_hand(latencies: list[float], z: float) -> tuple[float, float]:
    """x(r), x(s) of the order-statistic interval with deff 1 (one latency per session)."""
    n, ordered = len(latencies), sorted(latencies)
    r = max(1, math.floor(0.95 * n - z * math.sqrt(0.95 * 0.05 * n)))
    s = min(n, math.ceil(0.95 * n + z * math.sqrt(0.95 * 0.05 * n)))
    return ordered[r - 1], ordered[s - 1]


def test_bands_grown_over_syncs_while_latencies_drift_read_exact_p95s(
    sqlite_url: str, tmp_path: Path
) -> None:
    rng = random.Random(11)
    settings = AnalyticsSettings(min_samples=3)
    with Analytics(sqlite_url, path=tmp_path / "a.duckdb", settings=settings) as analytics:
        # the second piece is three times slower: the p95 leaves the first band
        for n, minute0, scale in ((3_000, 0, 1.0), (1_500, 100, 3.0), (3_000, 200, 1.0)):
            insert_rows(sqlite_url, _rows(rng, n, minute0, scale))
            analytics.refresh()
            _assert_exact(analytics)
            assert _kept_share(analytics) < 0.5


def test_a_z_too_wide_for_the_band_reads_every_latency(sqlite_url: str, tmp_path: Path) -> None:
    rng = random.Random(5)
    latencies = [round(rng.gammavariate(2, 400), 3) for _ in range(3_000)]
    rows = [served(i / 100, "A", session_id=f"s{i}", latency_ms=x) for i, x in enumerate(latencies)]
    insert_rows(sqlite_url, rows)
    settings = AnalyticsSettings(min_samples=3, confidence_z=25.0)
    with Analytics(sqlite_url, path=tmp_path / "a.duckdb", settings=settings) as analytics:
        assert _kept_share(analytics) < 0.5
        row = analytics.sql("SELECT * FROM upstream_p95_intervals").iloc[0]
        assert (row.p95_low_ms, row.p95_high_ms) == _interval_by_hand(latencies, 25.0)
        _assert_exact(analytics)


def test_deleted_and_changed_latencies_keep_the_band_exact(sqlite_url: str, tmp_path: Path) -> None:
    rng = random.Random(3)
    insert_rows(sqlite_url, _rows(rng, 4_000, 0, 1.0))
    settings = AnalyticsSettings(min_samples=3)
    engine = make_engine(sqlite_url)
    try:
        with Analytics(sqlite_url, path=tmp_path / "a.duckdb", settings=settings) as analytics:
            with engine.begin() as conn:  # the slowest go, some others get slower
                slowest = (
                    token_usage.select()
                    .with_only_columns(token_usage.c.id)
                    .order_by(token_usage.c.latency_ms.desc())
                    .limit(50)
                )
                conn.execute(delete(token_usage).where(token_usage.c.id.in_(slowest)))
                conn.execute(
                    update(token_usage)
                    .where(token_usage.c.id % 20 == 0)
                    .values(latency_ms=token_usage.c.latency_ms * 1.5)
                )
            result = analytics.refresh()
            assert result.rows_deleted == 50 and result.rows_updated > 150
            _assert_exact(analytics)
            assert _kept_share(analytics) < 0.5
    finally:
        engine.dispose()
