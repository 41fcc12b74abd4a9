"""The change-log gaps: what stays open, what a later sync fills, and when they close."""

from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa
import pytest

from ledger.analytics.copy import gaps

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    gaps.ensure_table(con)
    return con


def seen(*seqs: int) -> pa.Table:
    return pa.table({"seq": pa.array(seqs, pa.int64())})


def open_gaps(con: duckdb.DuckDBPyConnection) -> list[tuple[int, int, int]]:
    return con.execute("SELECT lo, hi, final_xmax FROM ledger_gaps ORDER BY lo").fetchall()


def test_unseen_seqs_stay_open_until_the_horizon_passes_the_snapshot_that_found_them(
    con: duckdb.DuckDBPyConnection,
) -> None:
    # seqs 3, 4 (a transaction still open) and 6..8 (rolled back, or open) are not seen
    assert (
        gaps.update(
            con, seen(1, 2, 5, 9, 10), old_max=0, new_max=10, xmin=5, xid_bound=lambda: 7, now=NOW
        )
        == gaps.Closed()
    )
    assert open_gaps(con) == [(2, 5, 7), (5, 9, 7)]
    assert gaps.open_ranges(con).pairs() == [(2, 5), (5, 9)]
    # seq 3 commits late; new seqs 11, 13 come with 12 unseen, found by a later snapshot
    gaps.update(con, seen(3, 11, 13), old_max=10, new_max=13, xmin=6, xid_bound=lambda: 9, now=NOW)
    assert open_gaps(con) == [(3, 5, 7), (5, 9, 7), (11, 13, 9)]
    # every transaction below 7 has ended: the gaps found by the first snapshot close
    closed = gaps.update(con, seen(), old_max=13, new_max=13, xmin=7, xid_bound=lambda: 9, now=NOW)
    assert closed == gaps.Closed(final=2) and open_gaps(con) == [(11, 13, 9)]
    assert not gaps.closable(con, xmin=8, now=NOW)
    assert gaps.closable(con, xmin=9, now=NOW)


def no_xid() -> int:
    raise AssertionError("an xid was asked for, and no gap opens")


def test_a_contiguous_new_region_records_nothing_and_costs_no_xid(
    con: duckdb.DuckDBPyConnection,
) -> None:
    all_seqs = seen(*range(1, 100_001))
    gaps.update(con, all_seqs, old_max=0, new_max=100_000, xmin=1, xid_bound=no_xid, now=NOW)
    assert open_gaps(con) == []


def test_gaps_open_too_long_are_given_up_and_counted(con: duckdb.DuckDBPyConnection) -> None:
    gaps.update(con, seen(1, 3), old_max=0, new_max=3, xmin=1, xid_bound=lambda: 5, now=NOW)
    later = NOW + gaps.GAP_MAX_AGE + dt.timedelta(seconds=1)
    assert gaps.closable(con, xmin=1, now=later)
    assert gaps.update(
        con, seen(), old_max=3, new_max=3, xmin=1, xid_bound=lambda: 5, now=later
    ) == gaps.Closed(expired=1)
    assert open_gaps(con) == []


def test_gap_bounds_that_are_not_integers_are_refused() -> None:
    with pytest.raises(ValueError, match="not integer lists"):
        gaps.Ranges(1, "1); DROP TABLE x; --", "2")
