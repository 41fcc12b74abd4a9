"""The state tables sync keeps: views read from them equal the views computed from rows.

Every view stored in the file reads aggregates that sync folds new rows into;
``views.filtered_query`` with no filter computes the same view from the rows.
These tests build ledgers, sync them in pieces (sessions and calls whose rows
arrive across syncs, rows that arrive late or out of time order) and check
that both agree, and that the answers match a single full sync.
"""

from __future__ import annotations

import math
import random
import uuid
import weakref
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
from sqlalchemy import delete, update

from ledger.analytics import VIEW_NAMES, Analytics, AnalyticsSettings
from ledger.analytics.models.views import Filters, filtered_query
from ledger.analytics.state import aggregates
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from tests.analytics.builders import edit_copy, failed, insert_rows, response_cache_row, served

UPSTREAMS = ("A", "B", "C", None)  # None: a direct provider, identity = provider


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    # None, NaN, Decimal and timestamps all sort as text. In Python, not pandas: these
    # frames hold a few rows, and pandas' sort by every column took 90 % of the comparison.
    rows = [[str(v) for v in row] for row in frame.itertuples(index=False, name=None)]
    order = sorted(range(len(rows)), key=rows.__getitem__)
    return frame.iloc[order].reset_index(drop=True)


def assert_same_frames(stored: pd.DataFrame, computed: pd.DataFrame, view: str) -> None:
    assert list(stored.columns) == list(computed.columns), view
    assert len(stored) == len(computed), view
    a, b = _sorted(stored), _sorted(computed)
    for column in a.columns:
        for left, right in zip(a[column], b[column], strict=True):
            if hasattr(left, "__len__") and not isinstance(left, str):  # list columns
                assert hasattr(right, "__len__") and list(left) == list(right), (view, column)
            elif isinstance(left, float) and isinstance(right, float):
                assert (math.isnan(left) and math.isnan(right)) or math.isclose(
                    left, right, rel_tol=1e-9, abs_tol=1e-12
                ), (view, column)
            else:
                assert (pd.isna(left) and pd.isna(right)) or left == right, (view, column)


#: Analytics whose stored views' column types were checked: types do not depend on the
#: rows, so a test syncing one file many times checks them once (half its queries).
_TYPES_CHECKED: weakref.WeakSet[Analytics] = weakref.WeakSet()


def assert_views_match_rows(analytics: Analytics) -> None:
    """Every stored view equals the same view computed from ``token_usage``, in its
    values and (once per open file) in its column types."""
    everything = Filters().parameters()
    for view in VIEW_NAMES:
        stored = analytics.sql(f'SELECT * FROM "{view}"')
        computed = analytics.sql(filtered_query(view), everything)
        assert_same_frames(stored, computed, view)
    if analytics in _TYPES_CHECKED:
        return
    _TYPES_CHECKED.add(analytics)
    for view in VIEW_NAMES:
        stored_types = analytics.sql(f'DESCRIBE SELECT * FROM "{view}"').iloc[:, :2]
        computed_types = analytics.sql(f"DESCRIBE {filtered_query(view)}", everything).iloc[:, :2]
        assert stored_types.values.tolist() == computed_types.values.tolist(), view


def random_rows(rng: random.Random, n: int, minute0: float) -> list[dict[str, Any]]:
    """Attempts of a few agents' sessions, every flag and odd case mixed in."""
    rows: list[dict[str, Any]] = []
    for _ in range(n):
        minute = minute0 + rng.uniform(-30, 60)  # some rows land before earlier ones
        s = rng.randrange(6)
        session = {
            "session_id": None if s == 5 else f"s{s}",
            "actor_id": None if s == 4 else f"agent{s % 3}",
            "requested_model": f"m{s % 2}",
            "session_key": f"k{s}" if rng.random() < 0.5 else None,
        }
        upstream = rng.choice(UPSTREAMS)
        cost = Decimal(rng.randrange(1, 10_000)) / Decimal(10**9) if rng.random() < 0.8 else None
        tokens = {"input_tokens": rng.randrange(0, 1000)}
        tokens["cache_read_tokens"] = rng.randrange(0, tokens["input_tokens"] + 1)
        kind = rng.random()
        if kind < 0.1:
            rows.append(response_cache_row(minute, **session))
        elif kind < 0.25:
            rows.append(failed(minute, upstream, cost_usd=cost, **session))
        else:
            extra = {"latency_ms": rng.uniform(10, 5000)} if rng.random() < 0.9 else {}
            row = served(minute, upstream, cost_usd=cost, **session, **tokens)
            rows.append({**row, **extra, "latency_ms": extra.get("latency_ms")})
    # a few calls with several attempts: a failure, then a fallback
    for first in rng.sample(range(len(rows)), k=min(5, len(rows))):
        base = rows[first]
        rows.append({**base, "event_id": str(uuid.uuid4()), "attempt": 2})
    return rows


def _open(url: str, path: Path) -> Analytics:
    return Analytics(url, path=path, settings=AnalyticsSettings(min_samples=3))


# Three workloads on SQLite; one on PostgreSQL, whose reading of the change log the
# other tests here cover (the folding after it is the same code whatever the source).
@pytest.mark.parametrize(
    ("ledger_url", "seed"),
    [
        ("sqlite", 1),
        ("sqlite", 2),
        ("sqlite", 3),
        pytest.param("postgresql", 1, marks=pytest.mark.postgres),
    ],
    indirect=["ledger_url"],
)
def test_views_synced_in_pieces_equal_the_views_computed_from_rows(
    ledger_url: str, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    with _open(ledger_url, tmp_path / "pieces.duckdb") as analytics:
        for piece in range(4):
            insert_rows(ledger_url, random_rows(rng, 40, piece * 20))
            analytics.refresh()
            assert_views_match_rows(analytics)
        pieces = {v: analytics.sql(f'SELECT * FROM "{v}"') for v in VIEW_NAMES}
    with _open(ledger_url, tmp_path / "whole.duckdb") as whole:
        for view in VIEW_NAMES:
            assert_same_frames(pieces[view], whole.sql(f'SELECT * FROM "{view}"'), view)


def test_a_session_whose_rows_arrive_across_two_syncs_counts_as_one(
    ledger_url: str, tmp_path: Path
) -> None:
    s = {"session_id": "s", "actor_id": "a", "session_key": "k"}
    first = [served(0, "A", **s), served(1, "A", **s), served(2, "B", **s)]
    # the next sync continues the session: B -> B, then a switch back to A
    second = [served(3, "B", **s), served(4, "A", **s), served(30, "A", **s)]
    insert_rows(ledger_url, first)
    with _open(ledger_url, tmp_path / "two.duckdb") as analytics:
        insert_rows(ledger_url, second)
        assert analytics.refresh().rows_added == 3
        row = analytics.session_stickiness().iloc[0]
        moves = analytics.transitions()
    assert (row.calls, row.transitions, row.switches, row.idle_releases) == (6, 5, 2, 0)
    assert row.window_transitions == 4  # 4 -> 30 minutes is past the 10-minute window
    assert row.stickiness == pytest.approx(1 - 2 / 4)
    assert row.distinct_upstreams == 2
    assert len(moves) == 5
    with _open(ledger_url, tmp_path / "one.duckdb") as once:
        assert_same_frames(
            once.session_stickiness(), pd.DataFrame([row]).reset_index(drop=True), "s"
        )


def test_an_attempt_synced_late_but_earlier_in_time_reorders_its_session(
    ledger_url: str, tmp_path: Path
) -> None:
    s = {"session_id": "s", "actor_id": "a"}
    insert_rows(ledger_url, [served(0, "A", **s), served(2, "A", **s)])
    with _open(ledger_url, tmp_path / "late.duckdb") as analytics:
        # minute 1 arrives after minute 2 was synced: A, B, A is two switches, not one
        insert_rows(ledger_url, [served(1, "B", **s)])
        analytics.refresh()
        row = analytics.session_stickiness().iloc[0]
        assert (row.calls, row.transitions, row.switches) == (3, 2, 2)
        assert_views_match_rows(analytics)


def test_a_call_whose_attempts_arrive_across_two_syncs_is_one_call(
    ledger_url: str, tmp_path: Path
) -> None:
    call = {"call_id": "c0000000-0000-4000-8000-000000000001", "session_id": "s"}
    insert_rows(ledger_url, [failed(0, "A", attempt=1, cost_usd=Decimal("0.001"), **call)])
    with _open(ledger_url, tmp_path / "call.duckdb") as analytics:
        insert_rows(ledger_url, [served(0.1, "B", attempt=2, cost_usd=Decimal("0.002"), **call)])
        analytics.refresh()
        calls = analytics.calls()
        costs = analytics.cost_attribution()
    assert len(calls) == 1
    one = calls.iloc[0]
    assert (one.status, one.attempts, bool(one.fell_back), one.upstream) == ("ok", 2, True, "B")
    assert one.cost_usd == Decimal("0.003")
    assert (costs.calls[0], costs.fallback_calls[0]) == (1, 1)


def test_a_call_that_gains_and_loses_attempts_across_syncs_matches_its_rows(
    ledger_url: str, tmp_path: Path
) -> None:
    # a call of one row is read from its row, one of several from the state: it moves
    # between the two as attempts arrive and go
    call = {"call_id": "c0000000-0000-4000-8000-000000000002", "session_id": "s"}
    other = served(0, "A", session_id="s", cost_usd=Decimal("0.004"))
    insert_rows(ledger_url, [failed(0, "A", attempt=1, cost_usd=Decimal("0.001"), **call), other])
    engine = make_engine(ledger_url)
    with _open(ledger_url, tmp_path / "moves.duckdb") as analytics:
        seen = []
        insert_rows(ledger_url, [served(0.1, "B", attempt=2, cost_usd=Decimal("0.002"), **call)])
        for change in (
            None,
            delete(token_usage).where(token_usage.c.attempt == 1, token_usage.c.status == "error"),
            update(token_usage).where(token_usage.c.upstream == "B").values(upstream="C"),
            delete(token_usage).where(token_usage.c.call_id == call["call_id"]),
        ):
            if change is not None:
                with engine.begin() as conn:
                    conn.execute(change)
            analytics.refresh()
            assert_views_match_rows(analytics)
            calls = analytics.calls().sort_values("cost_usd")
            seen.append([(c.attempts, c.upstream, c.cost_usd) for c in calls.itertuples()])
    engine.dispose()
    assert seen == [
        [(2, "B", Decimal("0.003")), (1, "A", Decimal("0.004"))],
        [(1, "B", Decimal("0.002")), (1, "A", Decimal("0.004"))],
        [(1, "C", Decimal("0.002")), (1, "A", Decimal("0.004"))],
        [(1, "A", Decimal("0.004"))],
    ]


def test_a_row_committed_late_in_the_reread_window_is_folded_in(
    ledger_url: str, tmp_path: Path
) -> None:
    s = {"session_id": "s", "actor_id": "a"}
    insert_rows(ledger_url, [served(0, "A", id=1, **s), served(2, "A", id=10, **s)])
    with _open(ledger_url, tmp_path / "window.duckdb") as analytics:
        insert_rows(ledger_url, [served(1, "B", id=5, **s)])
        assert analytics.refresh().rows_added == 1
        assert analytics.session_stickiness().switches[0] == 2
        assert_views_match_rows(analytics)


def test_the_p95_interval_is_exact_for_large_groups(sqlite_url: str, tmp_path: Path) -> None:
    rng = random.Random(7)
    latencies = [round(rng.gammavariate(2, 400), 3) for _ in range(600)]
    insert_rows(sqlite_url, [served(i / 100, "A", latency_ms=x) for i, x in enumerate(latencies)])
    with _open(sqlite_url, tmp_path / "p95.duckdb") as analytics:
        row = analytics.sql("SELECT * FROM upstream_p95_intervals").iloc[0]
        assert_views_match_rows(analytics)
    n, z, ordered = len(latencies), 1.96, sorted(latencies)
    r = max(1, math.floor(0.95 * n - z * math.sqrt(0.95 * 0.05 * n)))
    s = min(n, math.ceil(0.95 * n + z * math.sqrt(0.95 * 0.05 * n)))
    assert (row.p95_low_ms, row.p95_high_ms) == (ordered[r - 1], ordered[s - 1])


def test_a_file_without_state_tables_gets_them_rebuilt(sqlite_url: str, tmp_path: Path) -> None:
    s = {"session_id": "s", "actor_id": "a"}
    insert_rows(sqlite_url, [served(0, "A", **s), served(1, "B", **s)])
    path = tmp_path / "old.duckdb"
    _open(sqlite_url, path).close()
    with duckdb.connect(str(path)) as con:  # as a file written before the state existed
        con.execute("DROP TABLE state_meta")
        con.execute("DELETE FROM state_sessions")
    with Analytics(sqlite_url, path=path, sync=False) as analytics:
        assert analytics.session_stickiness().switches.tolist() == [1]


def test_editing_the_copy_by_hand_rebuilds_the_state(sqlite_url: str, tmp_path: Path) -> None:
    s = {"session_id": "s", "actor_id": "a"}
    insert_rows(sqlite_url, [served(0, "A", **s), served(1, "B", **s), served(2, "A", **s)])
    path = tmp_path / "edited.duckdb"
    with _open(sqlite_url, path) as analytics:
        edit_copy(analytics, "DELETE FROM token_usage WHERE upstream = 'B'")
    with Analytics(sqlite_url, path=path, sync=False) as analytics:
        assert analytics.session_stickiness().calls.tolist() == [2]
        assert_views_match_rows(analytics)
        # the ledger did not change: the sync has nothing to read, verify says what differs
        assert analytics.refresh().up_to_date_already
        differences = [(d.check, d.key, d.ledger, d.copy) for d in analytics.verify().differences]
        assert ("session rows", ("s", "a", "m"), 3, 2) in differences
        analytics.refresh(full=True)
        assert analytics.session_stickiness().calls.tolist() == [3]
        assert analytics.verify().ok
        assert_views_match_rows(analytics)


def test_a_rebuild_in_small_chunks_equals_one_in_a_single_chunk(
    ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    insert_rows(ledger_url, random_rows(random.Random(4), 150, 0))
    with _open(ledger_url, tmp_path / "whole.duckdb") as whole:
        once = {v: whole.sql(f'SELECT * FROM "{v}"') for v in VIEW_NAMES}
    monkeypatch.setattr(aggregates, "REBUILD_CHUNK_ROWS", 7)  # about 23 chunks
    with _open(ledger_url, tmp_path / "chunks.duckdb") as chunked:
        assert_views_match_rows(chunked)
        for view in VIEW_NAMES:
            assert_same_frames(chunked.sql(f'SELECT * FROM "{view}"'), once[view], view)


def test_a_file_of_the_previous_state_version_is_upgraded_on_open(
    sqlite_url: str, tmp_path: Path
) -> None:
    s = {"session_id": "s", "actor_id": "a", "input_tokens": 100}
    insert_rows(sqlite_url, [served(0, "A", **s), served(1, "A", cache_read_tokens=50, **s)])
    path = tmp_path / "v1.duckdb"
    _open(sqlite_url, path).close()
    with duckdb.connect(str(path)) as con:  # as version 1 wrote it: no tokens per transition
        con.execute("ALTER TABLE state_transitions DROP COLUMN input_tokens")
        con.execute("ALTER TABLE state_transitions DROP COLUMN cache_read_tokens")
        con.execute("UPDATE state_meta SET version = 1")
    with Analytics(sqlite_url, path=path, sync=False) as analytics:
        assert analytics.cache_decay_by_key().token_hit_rate.tolist() == [0.5]
        assert_views_match_rows(analytics)


def test_a_version_2_file_gains_the_previous_cache_reads_on_open(
    sqlite_url: str, tmp_path: Path
) -> None:
    s = {"session_id": "s", "actor_id": "a", "input_tokens": 100}
    rows = [served(0, "A", cache_read_tokens=80, **s), served(1, "B", cache_read_tokens=10, **s)]
    insert_rows(sqlite_url, rows)
    path = tmp_path / "v2.duckdb"
    _open(sqlite_url, path).close()
    with duckdb.connect(str(path)) as con:  # as version 2 wrote it
        con.execute("ALTER TABLE state_transitions DROP COLUMN previous_cache_read_tokens")
        con.execute("UPDATE state_meta SET version = 2")
    with Analytics(sqlite_url, path=path, sync=False) as analytics:
        # the switch lost the 80 tokens read before, minus the 10 read after
        assert analytics.switch_costs().cache_read_tokens_lost.tolist() == [70]
        assert_views_match_rows(analytics)


def test_reopening_restores_a_dropped_view_and_one_another_version_replaced(
    sqlite_url: str, tmp_path: Path
) -> None:
    insert_rows(sqlite_url, [served(0, "A", session_id="s"), served(1, "B", session_id="s")])
    path = tmp_path / "views.duckdb"
    _open(sqlite_url, path).close()
    with duckdb.connect(str(path)) as con:
        con.execute("DROP VIEW switch_costs")
    with Analytics(sqlite_url, path=path, sync=False) as analytics:
        assert analytics.switch_costs().switches.tolist() == [1]
        assert_views_match_rows(analytics)
    with duckdb.connect(str(path)) as con:  # as another version of the code would
        con.execute("CREATE OR REPLACE VIEW switch_counts AS SELECT 1 AS switches")
    with Analytics(sqlite_url, path=path, sync=False) as analytics:
        assert analytics.switch_costs().switches.tolist() == [1]
        assert_views_match_rows(analytics)
