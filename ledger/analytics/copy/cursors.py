"""How far the copy has read the ledger's change log: the cursor, the gaps, the extent."""

# SQL here is composed from ledger.schema's table name; values are bound.
# ruff: noqa: S608
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from ledger.analytics.copy import gaps
from ledger.analytics.copy.source import Horizon, LedgerSnapshot
from ledger.schema import TABLE_NAME


@dataclass(frozen=True, slots=True)
class Cursor:
    """How far the copy has read the ledger's change log."""

    source: str
    max_seq: int
    gaps_closed: int
    gaps_expired: int


def read_cursor(con: duckdb.DuckDBPyConnection) -> Cursor | None:
    rows = con.execute(
        "SELECT source, max_seq, gaps_closed, gaps_expired FROM ledger_cursor"
    ).fetchall()
    row = rows[0] if rows else None
    return None if row is None else Cursor(str(row[0]), int(row[1]), int(row[2]), int(row[3]))


def write_marks(
    con: duckdb.DuckDBPyConnection,
    snap: LedgerSnapshot,
    name: str,
    cursor: Cursor | None,
    horizon: Horizon,
    seen: pa.Table | None,
    closed_before: tuple[int, int],
) -> gaps.Closed:
    """Record the change log read up to ``horizon`` (gaps, cursor) and the copy's extent.

    ``seen``: the seqs read (a ``seq`` column); None when every seq up to the
    horizon was, which leaves no gap.
    """
    old_max = 0 if cursor is None else cursor.max_seq
    new_max = max(old_max, horizon.max_seq)
    if seen is None:
        gaps.clear(con)
        closed = gaps.Closed()
    else:
        closed = gaps.update(
            con,
            seen,
            old_max=old_max,
            new_max=new_max,
            xmin=horizon.xmin,
            xid_bound=snap.xid_bound,
            now=dt.datetime.now(dt.UTC),
        )
    con.execute("DELETE FROM ledger_cursor")
    con.execute(
        "INSERT INTO ledger_cursor VALUES (?, ?, ?, ?)",
        [
            name,
            new_max,
            closed_before[0] + closed.final,
            closed_before[1] + closed.expired,
        ],
    )
    rows, last_id = con.execute(
        f"SELECT count(*), coalesce(max(id), 0) FROM {TABLE_NAME}"
    ).fetchall()[0]
    con.execute("DELETE FROM ledger_sync")
    con.execute("INSERT INTO ledger_sync VALUES (?, ?, now(), ?)", [name, last_id, rows])
    return closed
