"""The ids below the copy's last one that it does not hold: where a late commit can land.

On PostgreSQL ids come from a sequence, so a transaction that took low ids
(the writer commits batches of up to 5,000 rows, several processes may write)
can commit after rows with higher ids were already copied. Such a row can only
land in an id the copy does not hold, so the copy keeps those *gaps* in
``ledger_gaps``: open intervals ``(lo, hi)`` of ids it lacks, ``held`` ids of
which it does hold (0, except where too many gaps were merged into one range).
Each sync asks the ledger how many rows the gaps hold, a few index probes; when
that exceeds ``held``, it copies them. Sequence values that were never used
(a rolled-back transaction, an ``ON CONFLICT`` replay) stay gaps: cheap to
probe, and never a reason to read the whole ledger.

The gaps are maintained with the state tables (:mod:`ledger.analytics.state`):
rebuilt with them, and updated in the same transaction as the rows they track.
"""

# Every SQL string here is a module constant over our own tables; values are bound.
# ruff: noqa: S608
from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import duckdb

from ledger.schema import TABLE_NAME

#: Beyond this many gaps, neighbours are merged so a probe stays a few thousand lookups.
MAX_GAPS: Final = 1_024

GAPS_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS ledger_gaps (lo BIGINT NOT NULL, hi BIGINT NOT NULL, "
    "held BIGINT NOT NULL)"
)

# Gaps among the copy's ids above $lo ($lo itself held, or 0 before the first id).
_GAPS_ABOVE: Final = f"""
INSERT INTO ledger_gaps
SELECT id, next_id, 0
FROM (
    SELECT id, lead(id) OVER (ORDER BY id) AS next_id
    FROM (SELECT CAST($lo AS BIGINT) AS id UNION ALL SELECT id FROM {TABLE_NAME} WHERE id > $lo)
)
WHERE next_id - id > 1
"""
_IDS_ABOVE: Final = f"SELECT count(*), max(id) FROM {TABLE_NAME} WHERE id > ?"

# Gaps that late ids landed in are replaced by what is left of them: the gaps
# between their bounds, the late ids and (merged ranges only) the ids held there.
_FILLED: Final = """
CREATE OR REPLACE TEMP TABLE gaps_filled AS
SELECT g.lo, g.hi, g.held
FROM ledger_gaps AS g
WHERE EXISTS (SELECT 1 FROM gaps_late AS l WHERE l.id > g.lo AND l.id < g.hi)
"""
_DROP_FILLED: Final = """
DELETE FROM ledger_gaps AS g
WHERE EXISTS (SELECT 1 FROM gaps_filled AS f WHERE f.lo = g.lo AND f.hi = g.hi)
"""
_HELD_IN_MERGED: Final = f"""
INSERT INTO gaps_points
SELECT f.lo, t.id
FROM gaps_filled AS f JOIN {TABLE_NAME} AS t ON t.id > f.lo AND t.id < f.hi
WHERE f.held > 0
"""
_REFILL: Final = """
INSERT INTO ledger_gaps
SELECT id, next_id, 0
FROM (
    SELECT id, lead(id) OVER (PARTITION BY grp ORDER BY id) AS next_id
    FROM (SELECT DISTINCT grp, id FROM gaps_points)
)
WHERE next_id - id > 1
"""

# Merging neighbours: every id between two gaps is held, so a merged range holds
# its width minus the ids its member gaps lacked.
_MERGE: Final = """
CREATE OR REPLACE TEMP TABLE gaps_merged AS
SELECT
    min(lo) AS lo,
    max(hi) AS hi,
    CAST(max(hi) - min(lo) - 1 - sum(hi - lo - 1 - held) AS BIGINT) AS held
FROM (SELECT *, (row_number() OVER (ORDER BY lo) - 1) // $per AS grp FROM ledger_gaps)
GROUP BY grp
"""


def ensure_table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(GAPS_DDL)


def _add_above(con: duckdb.DuckDBPyConnection, lo: int) -> None:
    """Record the gaps among the copy's ids above ``lo`` (held, or 0)."""
    row = con.execute(_IDS_ABOVE, [lo]).fetchone()
    count, top = (0, None) if row is None else row
    if top is None or int(top) - lo == int(count):
        return  # contiguous: the common case, no sort needed
    con.execute(_GAPS_ABOVE, {"lo": lo})


def rebuild(con: duckdb.DuckDBPyConnection) -> None:
    """Recompute every gap from the copy's ids (inside the caller's transaction)."""
    con.execute("DELETE FROM ledger_gaps")
    _add_above(con, 0)
    _merge_if_many(con)


def fold(con: duckdb.DuckDBPyConnection, *, above_id: int, late_ids: Sequence[int]) -> None:
    """Update the gaps after rows above ``above_id`` and the ``late_ids`` were copied."""
    if late_ids:
        con.execute(
            "CREATE OR REPLACE TEMP TABLE gaps_late AS SELECT unnest(CAST(? AS BIGINT[])) AS id",
            [list(late_ids)],
        )
        con.execute(_FILLED)
        con.execute(_DROP_FILLED)
        con.execute(
            "CREATE OR REPLACE TEMP TABLE gaps_points AS "
            "SELECT lo AS grp, lo AS id FROM gaps_filled UNION ALL "
            "SELECT lo, hi FROM gaps_filled UNION ALL "
            "SELECT f.lo, l.id FROM gaps_filled AS f JOIN gaps_late AS l "
            "ON l.id > f.lo AND l.id < f.hi"
        )
        merged = con.execute("SELECT count(*) FROM gaps_filled WHERE held > 0").fetchone()
        if merged and merged[0]:
            con.execute(_HELD_IN_MERGED)
        con.execute(_REFILL)
        for table in ("gaps_late", "gaps_filled", "gaps_points"):
            con.execute(f"DROP TABLE {table}")
    _add_above(con, above_id)
    _merge_if_many(con)


def _merge_if_many(con: duckdb.DuckDBPyConnection) -> None:
    row = con.execute("SELECT count(*) FROM ledger_gaps").fetchone()
    count = int(row[0]) if row else 0
    if count <= MAX_GAPS:
        return
    con.execute(_MERGE, {"per": -(-count // MAX_GAPS)})
    con.execute("DELETE FROM ledger_gaps")
    con.execute("INSERT INTO ledger_gaps SELECT lo, hi, held FROM gaps_merged")
    con.execute("DROP TABLE gaps_merged")


def current(con: duckdb.DuckDBPyConnection) -> tuple[list[tuple[int, int]], int]:
    """The gaps as ``(lo, hi)`` ranges, and how many ids in them the copy holds."""
    rows = con.execute("SELECT lo, hi, held FROM ledger_gaps ORDER BY lo").fetchall()
    return [(int(lo), int(hi)) for lo, hi, _ in rows], sum(int(h) for _, _, h in rows)
