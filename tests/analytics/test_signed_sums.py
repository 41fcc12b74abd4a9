"""State tables kept as sums per key: parts added and retracted, merged into touched groups."""

from __future__ import annotations

import duckdb

from ledger.analytics.signed_sums import SignedSums

SUMS = SignedSums("counts", "k", "CAST(sum(n) AS BIGINT), CAST(sum(v) AS BIGINT)", "n")


def _note(con: duckdb.DuckDBPyConnection, k: str, n: int, v: int) -> None:
    SUMS.note(con, f"INSERT INTO counts_delta VALUES ('{k}', {n}, {v})")


def test_merge_adds_and_retracts_only_in_the_touched_groups_and_drops_an_emptied_one() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE counts (k VARCHAR, n BIGINT, v BIGINT)")
    con.execute("INSERT INTO counts VALUES ('a', 2, 10), ('b', 1, 5), ('c', 3, 7)")
    _note(con, "a", 1, 4)  # a row joined group a
    _note(con, "b", -1, -5)  # group b's only row left
    _note(con, "d", 2, 1)  # a new group
    SUMS.merge(con)
    assert con.execute("SELECT * FROM counts ORDER BY k").fetchall() == [
        ("a", 3, 14),
        ("c", 3, 7),  # untouched
        ("d", 2, 1),
    ]
    # the delta is gone: a merge with nothing noted changes nothing
    SUMS.merge(con)
    assert con.execute("SELECT count(*) FROM counts").fetchone() == (3,)
