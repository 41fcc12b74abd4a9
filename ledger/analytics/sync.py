"""Incremental copy of the ledger's rows into the local DuckDB file, by ``id``.

Each sync reads only rows above the last id it copied, plus a short re-read
window below it: on PostgreSQL ids come from a sequence, so a transaction that
took a lower id can commit after a higher one was already copied. Rows in that
window that the file lacks are added; rows it has are skipped. A sync runs in
one DuckDB transaction, so an interrupted sync leaves the file as it was. The
same transaction folds the new rows into the state tables the views read
(:mod:`ledger.analytics.state`), so views and rows never disagree.

The whole copy is rebuilt when the file was filled from another ledger, or
when the ledger's ids went backwards (it was recreated).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ledger.analytics import state as aggregates
from ledger.analytics.local import insert_sql
from ledger.analytics.source import LedgerSource
from ledger.schema import TABLE_NAME
from ledger.store.engine import display_url

#: Ids below the last copied one that every sync reads again (see module docstring).
REREAD_IDS: Final = 1_000
#: Rows per INSERT into DuckDB: fewer, larger statements amortise planning.
CHUNK_ROWS: Final = 262_144

#: ``progress(rows_done, rows_total)``, called after each chunk of a sync.
ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What one sync did."""

    rows_added: int
    last_id: int
    rows_total: int
    seconds: float
    rebuilt: bool

    @property
    def up_to_date_already(self) -> bool:
        return self.rows_added == 0 and not self.rebuilt


@dataclass(frozen=True, slots=True)
class _Mark:
    source: str | None
    last_id: int
    rows_total: int


def _read_mark(con: duckdb.DuckDBPyConnection) -> _Mark:
    row = con.execute("SELECT source, last_id, rows_total FROM ledger_sync").fetchone()
    return _Mark(None, 0, 0) if row is None else _Mark(row[0], int(row[1]), int(row[2]))


def _chunks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.Table]:
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        pending.append(batch)
        size += batch.num_rows
        if size >= CHUNK_ROWS:
            yield pa.Table.from_batches(pending)
            pending, size = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


def _arrow_kinds(schema: pa.Schema) -> dict[str, str]:
    return {
        f.name: "string" if pa.types.is_string(f.type) or pa.types.is_large_string(f.type) else ""
        for f in schema
    }


def _copy_rows(
    con: duckdb.DuckDBPyConnection,
    source: LedgerSource,
    mark: _Mark,
    total: int,
    progress: ProgressCallback | None,
) -> tuple[int, int]:
    """Insert what the ledger has above the re-read floor; returns (rows added, max id seen)."""
    floor = max(0, mark.last_id - REREAD_IDS)
    added, seen, max_id = 0, 0, mark.last_id
    for chunk in _chunks(source.batches(floor)):
        con.register("ledger_incoming", chunk)
        try:
            sql = insert_sql(_arrow_kinds(chunk.schema), "ledger_incoming")
            row = con.execute(sql, [floor, mark.last_id]).fetchone()
        finally:
            con.unregister("ledger_incoming")
        added += int(row[0]) if row else 0
        seen += chunk.num_rows
        max_id = max(max_id, int(pc.max(chunk.column("id")).as_py()))
        if progress is not None:
            progress(min(seen, total), total)
    return added, max_id


def _ids_between(con: duckdb.DuckDBPyConnection, low: int, high: int) -> set[int]:
    """Ids the file holds in ``(low, high]``: the re-read window, a thousand at most."""
    rows = con.execute(
        f"SELECT id FROM {TABLE_NAME} WHERE id > ? AND id <= ?",  # noqa: S608
        [low, high],
    ).fetchall()
    return {int(r[0]) for r in rows}


def ensure_aggregates(con: duckdb.DuckDBPyConnection) -> bool:
    """Rebuild the state tables if they do not match ``token_usage``; whether it was needed.

    Files written before the state tables existed, or whose ``token_usage`` was
    edited by hand, get them rebuilt once from their rows.
    """
    if aggregates.is_current(con):
        return False
    con.execute("BEGIN TRANSACTION")
    try:
        aggregates.rebuild(con)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return True


def sync(
    con: duckdb.DuckDBPyConnection,
    source: LedgerSource,
    *,
    full: bool = False,
    progress: ProgressCallback | None = None,
) -> SyncResult:
    """Bring the file's ``token_usage`` up to date with the ledger."""
    started = time.perf_counter()
    name = display_url(source.url)
    mark = _read_mark(con)
    floor = max(0, mark.last_id - REREAD_IDS)
    state = source.state(floor)
    rebuild = (
        full
        or mark.source not in (None, name)
        or (mark.last_id > 0 and (state.max_id or 0) < mark.last_id)
    )
    if not rebuild:
        (held,) = con.execute(
            f"SELECT count(*) FROM {TABLE_NAME} WHERE id > ? AND id <= ?",  # noqa: S608
            [floor, mark.last_id],
        ).fetchone() or (0,)
        if held == state.rows_above and (state.max_id or 0) <= mark.last_id:
            return SyncResult(
                0, mark.last_id, mark.rows_total, time.perf_counter() - started, False
            )
    if rebuild:
        mark = _Mark(name, 0, 0)
        state = source.state(0)
    con.execute("BEGIN TRANSACTION")
    try:
        # The state can take the new rows only if it matched the table before them.
        foldable = not rebuild and aggregates.is_current(con)
        window = (max(0, mark.last_id - REREAD_IDS), mark.last_id)
        held_before = _ids_between(con, *window)
        if rebuild:
            con.execute(f"DELETE FROM {TABLE_NAME}")  # noqa: S608
        added, last_id = _copy_rows(con, source, mark, state.rows_above, progress)
        total = mark.rows_total + added
        if foldable:
            late = sorted(_ids_between(con, *window) - held_before)
            aggregates.fold_new_rows(con, above_id=mark.last_id, late_ids=late)
        else:
            aggregates.rebuild(con)
        con.execute("DELETE FROM ledger_sync")
        con.execute("INSERT INTO ledger_sync VALUES (?, ?, now(), ?)", [name, last_id, total])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return SyncResult(added, last_id, total, time.perf_counter() - started, rebuild)
