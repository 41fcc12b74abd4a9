"""State tables kept as sums per key: parts added and retracted, merged into touched groups."""

from __future__ import annotations

import duckdb

from ledger.analytics.state.signed_sums import SignedSums

# A relation of (k, v) rows counted and summed per k, as the state modules' parts do.
SUMS = SignedSums(
    "counts",
    "CREATE TABLE IF NOT EXISTS counts (k VARCHAR, n BIGINT, v BIGINT)",
    "k",
    "INSERT INTO counts_delta SELECT k, {sign} * count(*), {sign} * sum(v) FROM {src} GROUP BY k",
    "CAST(sum(n) AS BIGINT), CAST(sum(v) AS BIGINT)",
    "n",
)


def rows(*values: tuple[str, int]) -> str:
    return "(VALUES " + ", ".join(f"('{k}', {v})" for k, v in values) + ") AS r(k, v)"


def test_merge_adds_and_retracts_only_in_the_touched_groups_and_drops_an_emptied_one() -> None:
    con = duckdb.connect()
    SUMS.ensure_table(con)
    con.execute("INSERT INTO counts VALUES ('a', 2, 10), ('b', 1, 5), ('c', 3, 7)")
    SUMS.add(con, rows(("a", 4), ("d", 1), ("d", 0)))  # a row joined group a, two a new d
    SUMS.retract(con, rows(("b", 5)))  # group b's only row left
    SUMS.merge(con)
    assert con.execute("SELECT * FROM counts ORDER BY k").fetchall() == [
        ("a", 3, 14),
        ("c", 3, 7),  # untouched
        ("d", 2, 1),
    ]
    # the delta is gone: a merge with nothing noted changes nothing
    SUMS.merge(con)
    assert con.execute("SELECT count(*) FROM counts").fetchone() == (3,)
