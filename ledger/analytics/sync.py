"""Incremental copy of the ledger's rows into the local DuckDB file, by ``id``.

Each sync reads the rows above the last id it copied, and the rows that landed
in the copy's *gaps* (ids below it that it does not hold, see
:mod:`ledger.analytics.gaps`): on PostgreSQL ids come from a sequence, so a
transaction that took lower ids can commit after higher ones were copied.
With nothing new, a sync costs one ``max(id)`` lookup and one probe of the
gaps (none at all on a ledger whose ids have no holes).

A usual sync runs in one DuckDB transaction, so an interrupted sync leaves
the file as it was; the same transaction folds the new rows into the state
tables the views read (:mod:`ledger.analytics.state`), so views and rows never
disagree. A bulk sync (the first, a rebuild, a backlog of a quarter of the
file or more) commits in steps instead, to keep memory bounded: see
:func:`_sync_in_steps`.

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

from ledger.analytics import gaps
from ledger.analytics import state as aggregates
from ledger.analytics.local import insert_sql
from ledger.analytics.source import LedgerSource
from ledger.schema import TABLE_NAME
from ledger.store.engine import display_url

#: Rows per INSERT into DuckDB: fewer, larger statements amortise planning.
CHUNK_ROWS: Final = 262_144
#: Rows a bulk sync copies between two checkpoints (see :func:`_sync_in_steps`).
CHECKPOINT_ROWS: Final = 2_000_000

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


def _insert(con: duckdb.DuckDBPyConnection, chunk: pa.Table, low: int, high: int) -> list[int]:
    """Insert the chunk's rows the file lacks (it may hold ids in ``(low, high]``); their ids."""
    con.register("ledger_incoming", chunk)
    try:
        sql = insert_sql(_arrow_kinds(chunk.schema), "ledger_incoming") + " RETURNING id"
        return [int(r[0]) for r in con.execute(sql, [low, high]).fetchall()]
    finally:
        con.unregister("ledger_incoming")


def _insert_new(con: duckdb.DuckDBPyConnection, chunk: pa.Table, last_id: int) -> int:
    """Insert a chunk of rows above ``last_id`` (none can be held: no lookups); how many."""
    con.register("ledger_incoming", chunk)
    try:
        sql = insert_sql(_arrow_kinds(chunk.schema), "ledger_incoming")
        row = con.execute(sql, [last_id, last_id]).fetchone()
    finally:
        con.unregister("ledger_incoming")
    return int(row[0]) if row else 0


def _copy_rows(
    con: duckdb.DuckDBPyConnection,
    source: LedgerSource,
    last_id: int,
    total: int,
    progress: ProgressCallback | None,
) -> tuple[int, int]:
    """Insert what the ledger has above ``last_id``; returns (rows added, max id seen)."""
    added, max_id = 0, last_id
    for chunk in _chunks(source.batches(last_id)):
        added += _insert_new(con, chunk, last_id)
        max_id = max(max_id, int(pc.max(chunk.column("id")).as_py()))
        if progress is not None:
            progress(min(added, total), total)
    return added, max_id


def _copy_late(
    con: duckdb.DuckDBPyConnection, source: LedgerSource, ranges: list[tuple[int, int]]
) -> list[int]:
    """Insert the rows that landed in the gaps ``ranges``; returns their ids."""
    late: list[int] = []
    for chunk in _chunks(source.batches_in(ranges)):
        ids = chunk.column("id")
        low = int(pc.min(ids).as_py())  # the sentinel (-1) included: a harmless bound
        late += _insert(con, chunk, low, int(pc.max(ids).as_py()))
    return late


def ensure_aggregates(con: duckdb.DuckDBPyConnection) -> bool:
    """Rebuild the state tables if they do not match ``token_usage``; whether it was needed.

    Files written before the state tables existed (or by an older version), or
    whose ``token_usage`` was edited by hand, get them rebuilt from their rows.
    """
    if aggregates.is_current(con):
        return False
    aggregates.rebuild_in_steps(con)
    return True


def _write_mark(con: duckdb.DuckDBPyConnection, name: str, last_id: int, rows_total: int) -> None:
    con.execute("DELETE FROM ledger_sync")
    con.execute("INSERT INTO ledger_sync VALUES (?, ?, now(), ?)", [name, last_id, rows_total])


def _sync_in_one_transaction(
    con: duckdb.DuckDBPyConnection,
    source: LedgerSource,
    mark: _Mark,
    ranges: list[tuple[int, int]] | None,
    total: int,
    progress: ProgressCallback | None,
) -> tuple[int, int]:
    """Copy the new rows and fold them into the state, all or nothing; (rows added, last id)."""
    con.execute("BEGIN TRANSACTION")
    try:
        late = _copy_late(con, source, ranges) if ranges else []
        added, last_id = _copy_rows(con, source, mark.last_id, total, progress)
        aggregates.fold_new_rows(con, above_id=mark.last_id, late_ids=late)
        _write_mark(con, str(mark.source), last_id, mark.rows_total + added + len(late))
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return added + len(late), last_id


def _sync_in_steps(
    con: duckdb.DuckDBPyConnection,
    source: LedgerSource,
    mark: _Mark,
    ranges: list[tuple[int, int]] | None,
    total: int,
    progress: ProgressCallback | None,
) -> tuple[int, int]:
    """A bulk copy (a first sync, a rebuild, a large backlog) in committed steps.

    DuckDB holds what a transaction wrote in memory until a checkpoint, so
    copying millions of rows in one transaction peaks at several GiB. Here the
    state is invalidated first, each chunk of rows commits with the mark that
    says how far the copy got, a checkpoint follows every CHECKPOINT_ROWS, and
    the state is rebuilt in steps last. An interrupted bulk sync leaves a
    consistent prefix of the ledger: the next sync carries on from its mark and
    rebuilds the state.
    """
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("DELETE FROM state_meta")  # not current until rebuilt below
        if mark.last_id == 0:
            con.execute(f"DELETE FROM {TABLE_NAME}")  # noqa: S608 (a rebuild)
        late = _copy_late(con, source, ranges) if ranges else []
        _write_mark(con, str(mark.source), mark.last_id, mark.rows_total + len(late))
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    added, last_id, since_checkpoint = len(late), mark.last_id, 0
    for chunk in _chunks(source.batches(mark.last_id)):
        con.execute("BEGIN TRANSACTION")
        try:
            added += _insert_new(con, chunk, last_id)
            last_id = max(last_id, int(pc.max(chunk.column("id")).as_py()))
            _write_mark(con, str(mark.source), last_id, mark.rows_total + added)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        since_checkpoint += chunk.num_rows
        if since_checkpoint >= CHECKPOINT_ROWS:
            aggregates.checkpoint(con)
            since_checkpoint = 0
        if progress is not None:
            progress(min(added, total), total)
    aggregates.checkpoint(con)
    aggregates.rebuild_in_steps(con)
    return added, last_id


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
    max_id = source.max_id() or 0
    rebuild = full or mark.source not in (None, name) or max_id < mark.last_id
    late_rows = False
    ranges: list[tuple[int, int]] = []
    if not rebuild:
        ensure_aggregates(con)  # the gaps must describe the rows the file holds
        ranges, held = gaps.current(con)
        late_rows = bool(ranges) and source.count_in(ranges) > held
        if max_id <= mark.last_id and not late_rows:
            return SyncResult(
                0, mark.last_id, mark.rows_total, time.perf_counter() - started, False
            )
        mark = _Mark(name, mark.last_id, mark.rows_total)
    else:
        mark = _Mark(name, 0, 0)
    total = source.count_above(mark.last_id)
    # Above this many new rows the state is rebuilt rather than merged: steps then.
    bulk = rebuild or total >= aggregates.REBUILD_SHARE * mark.rows_total
    run = _sync_in_steps if bulk else _sync_in_one_transaction
    added, last_id = run(con, source, mark, ranges if late_rows else None, total, progress)
    return SyncResult(
        added, last_id, mark.rows_total + added, time.perf_counter() - started, rebuild
    )
