"""The change-log seqs a sync has not seen below the highest one it has: where a late commit lands.

On PostgreSQL ``ledger_changes.seq`` comes from a sequence, taken before the
writing transaction commits: a seq can become visible after higher ones (a
late commit) or never (a rollback). The copy keeps the seqs it has not seen
below its highest as *gaps* in ``ledger_gaps``: open intervals ``(lo, hi)``,
each with the xid ``final_xmax`` after which it can hold nothing new, and
when it was opened. Each sync reads the changes inside the open gaps (one
index range per gap, see :mod:`ledger.analytics.copy.source`), then:

* closes the gaps that are final (``final_xmax <= xmin`` of the sync's
  snapshot: every transaction that could commit there has ended, and the
  sync has just read what they left), counted in ``ledger_cursor.gaps_closed``;
* closes the gaps open longer than :data:`GAP_MAX_AGE` (a transaction open a
  day, or one unrelated to the ledger holding the xmin back), or beyond
  :data:`MAX_GAPS` (oldest first), counted in ``ledger_cursor.gaps_expired``;
  a late row landing in one afterwards is missed, which ``ledger sync
  --verify`` reports and ``ledger sync --full`` repairs.

The gaps are bookkeeping of the ledger read, not of the rows: they live in the
sync's transaction with the cursor (:mod:`ledger.analytics.copy.sync`).
"""

# Every SQL string here is a module constant over our own tables; values are bound.
from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

#: A gap open this long is closed anyway: no ledger transaction lives a day.
GAP_MAX_AGE: Final = dt.timedelta(days=1)
#: At most this many gaps are kept (each is one index probe per sync).
MAX_GAPS: Final = 100_000

_INTEGER_LIST: Final = re.compile(r"(-?[0-9]+(,-?[0-9]+)*)?")

GAPS_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS ledger_gaps (lo BIGINT NOT NULL, hi BIGINT NOT NULL, "
    "final_xmax BIGINT NOT NULL, opened_at TIMESTAMPTZ NOT NULL)"
)
_OLD_SHAPE: Final = (
    "SELECT count(*) FROM duckdb_columns() WHERE table_name = 'ledger_gaps' "
    "AND column_name = 'held'"
)

# Each open gap, and the new region (old max, new max], is a group of points:
# its bounds and the seqs seen inside it; what is left open are the runs
# between consecutive points. A group keeps its final_xmax and opened_at.
_GROUPS: Final = """
CREATE OR REPLACE TEMP TABLE gaps_groups AS
SELECT lo, hi, final_xmax, opened_at FROM ledger_gaps
UNION ALL
SELECT $old_max, $new_max + 1, $xmax, $now WHERE $new_max > $old_max
"""
_POINTS: Final = """
CREATE OR REPLACE TEMP TABLE gaps_points AS
SELECT lo AS grp, lo AS p FROM gaps_groups
UNION ALL SELECT lo, hi FROM gaps_groups
UNION ALL SELECT g.lo, s.seq FROM gaps_groups AS g JOIN gaps_seen AS s
    ON s.seq > g.lo AND s.seq < g.hi
"""
_REFILL: Final = """
INSERT INTO ledger_gaps
SELECT p.p, p.next_p, g.final_xmax, g.opened_at
FROM (
    SELECT grp, p, lead(p) OVER (PARTITION BY grp ORDER BY p) AS next_p
    FROM (SELECT DISTINCT grp, p FROM gaps_points)
) AS p
JOIN gaps_groups AS g ON g.lo = p.grp
WHERE p.next_p - p.p > 1
"""


@dataclass(frozen=True, slots=True)
class Closed:
    """Gaps one sync closed: final ones, and ones given up on (too old or too many)."""

    final: int = 0
    expired: int = 0


def ensure_table(con: duckdb.DuckDBPyConnection) -> None:
    row = con.execute(_OLD_SHAPE).fetchone()
    if row and row[0]:  # a file from before the change log: its gaps were row ids
        con.execute("DROP TABLE ledger_gaps")
    con.execute(GAPS_DDL)


@dataclass(frozen=True, slots=True)
class Ranges:
    """The open gaps, as the ledger query takes them: bounds as comma-separated text
    (built by DuckDB: ten thousand gaps cost no Python loop)."""

    count: int
    los: str
    his: str

    def __post_init__(self) -> None:
        # They go into SQL text: integers only, whatever the file was edited to hold.
        if not _INTEGER_LIST.fullmatch(self.los) or not _INTEGER_LIST.fullmatch(self.his):
            raise ValueError(f"gap bounds are not integer lists: {self.los[:40]!r}")

    def pairs(self) -> list[tuple[int, int]]:
        if not self.count:
            return []
        return list(zip(map(int, self.los.split(",")), map(int, self.his.split(",")), strict=True))


def open_ranges(con: duckdb.DuckDBPyConnection) -> Ranges:
    (row,) = con.execute(
        "SELECT count(*), coalesce(string_agg(CAST(lo AS VARCHAR), ',' ORDER BY lo), ''), "
        "coalesce(string_agg(CAST(hi AS VARCHAR), ',' ORDER BY lo), '') FROM ledger_gaps"
    ).fetchall()
    return Ranges(int(row[0]), str(row[1]), str(row[2]))


def clear(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("DELETE FROM ledger_gaps")


def closable(con: duckdb.DuckDBPyConnection, *, xmin: int, now: dt.datetime) -> bool:
    """Whether a sync at snapshot ``xmin`` would close any gap (else it writes nothing)."""
    return bool(
        _count(
            con,
            "SELECT count(*) FROM ledger_gaps WHERE final_xmax <= $xmin OR opened_at < $cut",
            {"xmin": xmin, "cut": now - GAP_MAX_AGE},
        )
    )


def _count(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, object]) -> int:
    rows = con.execute(sql, params).fetchall()  # all: a half-read result blocks the connection
    return 0 if not rows or rows[0][0] is None else int(rows[0][0])


def update(
    con: duckdb.DuckDBPyConnection,
    seen: pa.Table,
    *,
    old_max: int,
    new_max: int,
    xmin: int,
    xid_bound: Callable[[], int],
    now: dt.datetime,
) -> Closed:
    """Record what a sync read (``seen``: a ``seq`` column), then close what is final.

    ``old_max``/``new_max``: the highest seq seen before and after this sync;
    ``xmin``: the bound of the snapshot it read in; ``xid_bound()``: an xid above
    every writer of a seq up to ``new_max``, asked only if a new gap opens.
    """
    # Distinct: a range entry comes once per id it names (ledger.analytics.copy.source),
    # and the count below must count seqs.
    seqs = pc.unique(seen.column("seq"))
    above = pc.greater(seqs, old_max)
    if (pc.sum(above).as_py() or 0) == new_max - old_max:
        # The new region is contiguous (the usual case, and a first sync of a
        # ledger without rollbacks): only the seqs inside old gaps matter.
        seen = pa.table({"seq": pc.filter(seqs, pc.invert(above))})
        new_max = old_max
    else:
        seen = pa.table({"seq": seqs})
    xmax = xid_bound() if new_max > old_max else 0
    con.register("gaps_seen", seen.select(["seq"]))
    try:
        con.execute(_GROUPS, {"old_max": old_max, "new_max": new_max, "xmax": xmax, "now": now})
        con.execute(_POINTS)
    finally:
        con.unregister("gaps_seen")
    con.execute("DELETE FROM ledger_gaps")
    con.execute(_REFILL)
    con.execute("DROP TABLE gaps_points")
    con.execute("DROP TABLE gaps_groups")
    final = _count(con, "DELETE FROM ledger_gaps WHERE final_xmax <= $xmin", {"xmin": xmin})
    expired = _count(
        con, "DELETE FROM ledger_gaps WHERE opened_at < $cut", {"cut": now - GAP_MAX_AGE}
    )
    expired += _count(
        con,
        "DELETE FROM ledger_gaps WHERE lo IN (SELECT lo FROM ledger_gaps "
        "ORDER BY opened_at DESC, lo DESC OFFSET $keep)",
        {"keep": MAX_GAPS},
    )
    return Closed(final, expired)
