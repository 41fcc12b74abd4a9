"""Incremental copy of the ledger into the local DuckDB file, driven by the ledger's change log.

Change tracking
---------------
Triggers (migrations 0003, 0007) append the id of every inserted, updated or
deleted ``token_usage`` row to ``ledger_changes`` inside the writing
transaction; the ledger's own writer logs its batches itself, in the same
transaction and with the same effect (see :mod:`ledger.store.sink`): on
SQLite one entry per row, on PostgreSQL one *range* entry per run of
consecutive ids (``row_id``..``last_id``), after its rows are written. ``seq``
numbers that log; the reads expand a range into one ``(seq, row_id)`` per id
(:mod:`ledger.analytics.copy.source`), so the gap bookkeeping counts distinct seqs.
Each sync reads, in one snapshot of the ledger (REPEATABLE READ on PostgreSQL,
one read transaction on SQLite):

* the changes above ``max_seq``, the highest seq it has seen, and the
  changes inside its open *gaps*, seqs below that it has not seen
  (:mod:`ledger.analytics.copy.gaps`);
* the current version of every row those changes name; a row named but
  absent was deleted.

and replaces exactly those rows in the copy: their old versions go, their
current ones come in. Applying a change twice gives the same copy, so nothing
depends on reading each change exactly once; a row's id is a key, never an
order (ids are taken in one order and committed in another, and SQLite's
AUTOINCREMENT keeps a deleted id from coming back).

Why the gaps close exactly. On PostgreSQL ``seq`` comes from a sequence, taken
before commit: a seq can turn visible after higher ones (a late commit) or
never (a rollback). Every seq at or below the highest one a snapshot sees was
taken before that snapshot, by a transaction that already had its xid (the
trigger runs after the row is written, the writer logs after its COPY). When a
sync opens a gap it asks for a new xid after its snapshot
(:meth:`~ledger.analytics.copy.source.LedgerSnapshot.xid_bound`), so every such
transaction is below it; the gap remembers it (``final_xmax``).
Once a later snapshot's ``xmin`` reaches it, every such transaction has ended,
that sync reads the gap one last time and closes it. (The snapshot's own
``xmax`` is no such bound: it is the latest *completed* xid + 1, and a writer
that took its xid after another's but its seq before can be running above it;
trusting it lost a committed batch under load.) Gaps open longer
than :data:`~ledger.analytics.copy.gaps.GAP_MAX_AGE` (a transaction open for a day,
or an unrelated one holding ``xmin`` back) are closed anyway and counted;
``ledger sync --verify`` then tells whether the copy still matches. SQLite has
one writer at a time and its AUTOINCREMENT rolls back with the transaction, so
its log has no gaps.

Cost. With nothing new a sync is one snapshot, one ``max(seq)`` and one
index probe per open gap. The changed rows are read by primary key; the state
tables (:mod:`ledger.analytics.state.aggregates`) fold them in the same DuckDB
transaction as the rows, so an interrupted sync leaves the file as it was.
A bulk sync (the first, a rebuild, a backlog of a quarter of the copy or more)
commits in steps to bound memory (:func:`_apply_in_steps`): the cursor is
written last, so an interrupted one is applied again, harmlessly.

The whole copy is rebuilt when it was filled from another ledger, when the
change log went backwards (the ledger was recreated), or on ``full``.
"""

# SQL here is composed from module constants and ledger.schema names; values are bound.
# ruff: noqa: S608
from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Final

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from ledger.analytics.copy import bulk, cursors, gaps, prefetch
from ledger.analytics.copy.source import Horizon, LedgerSnapshot, LedgerSource
from ledger.analytics.state import aggregates, steps
from ledger.schema import TABLE_NAME
from ledger.store.engine import display_url

#: Up to this many changed rows are read by listing their ids (else by the log again).
LISTED_IDS: Final = 50_000


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What one sync did.

    ``rows_added``: rows the copy did not hold; ``rows_updated``: rows it held
    whose new version it took; ``rows_deleted``: rows it dropped. ``last_id``:
    the copy's highest id. ``gaps_open``: change-log gaps still awaited;
    ``gaps_expired``: gaps given up on so far (see :mod:`ledger.analytics.copy.gaps`).
    """

    rows_added: int
    last_id: int
    rows_total: int
    seconds: float
    rebuilt: bool
    rows_updated: int = 0
    rows_deleted: int = 0
    gaps_open: int = 0
    gaps_expired: int = 0

    @property
    def up_to_date_already(self) -> bool:
        return self.rows_added == self.rows_updated == self.rows_deleted == 0 and not self.rebuilt


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    rows = con.execute(sql).fetchall()  # all: a half-read result blocks the connection
    return 0 if not rows or rows[0][0] is None else int(rows[0][0])


def ensure_aggregates(con: duckdb.DuckDBPyConnection) -> bool:
    """Rebuild the state tables if they do not match ``token_usage``; whether it was needed.

    Files written before the state tables existed (or by an older version), or
    whose ``token_usage`` was edited by hand, get them rebuilt from their rows.
    """
    if aggregates.is_current(con):
        return False
    aggregates.rebuild_in_steps(con)
    return True


@dataclass(slots=True)
class _Counts:
    added: int = 0
    updated: int = 0
    deleted: int = 0
    closed: gaps.Closed = field(default_factory=gaps.Closed)


def _take_changed_ids(con: duckdb.DuckDBPyConnection, changes: pa.Table) -> None:
    """``sync_ids``: the distinct row ids the changes name; ``state_removed_rows``: the
    copy's versions of them, deleted from ``token_usage``."""
    con.register("sync_changes", changes)
    try:
        con.execute(
            "CREATE OR REPLACE TEMP TABLE sync_ids AS "
            "SELECT DISTINCT row_id AS id FROM sync_changes"
        )
    finally:
        con.unregister("sync_changes")
    # The id range lets zone maps skip the copy's untouched row groups.
    held = (
        f"FROM {TABLE_NAME} WHERE id BETWEEN (SELECT min(id) FROM sync_ids) "
        "AND (SELECT max(id) FROM sync_ids) AND id IN (SELECT id FROM sync_ids)"
    )
    con.execute(f"CREATE OR REPLACE TEMP TABLE state_removed_rows AS SELECT * {held}")
    if _one(con, "SELECT count(*) FROM state_removed_rows"):
        con.execute(f"DELETE {held}")


def _new_rows_table(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(
        "CREATE OR REPLACE TEMP TABLE state_new_rows AS "
        f"SELECT * FROM {TABLE_NAME} WHERE id BETWEEN (SELECT min(id) FROM sync_ids) "
        "AND (SELECT max(id) FROM sync_ids) AND id IN (SELECT id FROM sync_ids)"
    )


def _count_effects(con: duckdb.DuckDBPyConnection, counts: _Counts) -> None:
    new = _one(con, "SELECT count(*) FROM state_new_rows")
    old = _one(con, "SELECT count(*) FROM state_removed_rows")
    counts.updated = _one(
        con, "SELECT count(*) FROM state_new_rows WHERE id IN (SELECT id FROM state_removed_rows)"
    )
    counts.added = new - counts.updated
    counts.deleted = old - counts.updated


def _drop_temps(con: duckdb.DuckDBPyConnection) -> None:
    for table in ("sync_ids", "state_removed_rows", "state_new_rows"):
        con.execute(f"DROP TABLE IF EXISTS {table}")


def _apply_in_one_transaction(
    con: duckdb.DuckDBPyConnection,
    snap: LedgerSnapshot,
    cursor: cursors.Cursor,
    ranges: gaps.Ranges,
    changes: pa.Table,
    horizon: Horizon,
    progress: bulk.ProgressCallback | None,
) -> _Counts:
    """Apply the changes and fold them into the state, all or nothing."""
    counts = _Counts()

    def work() -> None:
        if changes.num_rows:
            _take_changed_ids(con, changes)
            distinct = pc.unique(changes.column("row_id"))
            if len(distinct) <= LISTED_IDS:
                named = snap.rows_with_ids(distinct)
            else:
                named = snap.rows_named(cursor.max_seq, ranges)
            for chunk in bulk.chunks(named):
                bulk.insert(con, chunk)
            _new_rows_table(con)
            _count_effects(con, counts)
            aggregates.fold_changes(con)
            _drop_temps(con)
        counts.closed = cursors.write_marks(
            con,
            snap,
            cursor.source,
            cursor,
            horizon,
            changes,
            (cursor.gaps_closed, cursor.gaps_expired),
        )

    steps.in_transaction(con, work)
    if progress is not None:
        progress(counts.added + counts.updated, counts.added + counts.updated)
    return counts


def _apply_in_steps(
    con: duckdb.DuckDBPyConnection,
    snap: LedgerSnapshot,
    name: str,
    cursor: cursors.Cursor | None,
    ranges: gaps.Ranges,
    changes: pa.Table | None,
    horizon: Horizon,
    total: int,
    progress: bulk.ProgressCallback | None,
    memory_limit: str | None = None,
) -> _Counts:
    """A bulk sync (a rebuild when ``changes`` is None) in committed steps.

    DuckDB holds what a transaction wrote in memory until a checkpoint, so
    copying millions of rows in one transaction peaks at several GiB. Here the
    state is invalidated and the changed rows (every row, for a rebuild)
    removed first; every :data:`~ledger.analytics.copy.bulk.CHECKPOINT_ROWS` rows
    commit and are checkpointed, the state is rebuilt in steps, and the cursor is written last. An
    interrupted bulk sync is simply run again by the next one. The next chunk is
    read (ADBC) on a thread while DuckDB inserts this one: both release the GIL,
    and on an idle 2-core machine the copy of 1M rows took 9.5 s instead of 10.9 s
    (an earlier measurement on a loaded machine saw no gain).
    """
    counts = _Counts()

    def start() -> None:
        con.execute("DELETE FROM state_meta")  # not current until rebuilt below
        if changes is None:
            con.execute("DELETE FROM ledger_cursor")  # a rebuild restarts if interrupted
            gaps.clear(con)
            counts.deleted = _one(con, f"SELECT count(*) FROM {TABLE_NAME}")
            con.execute(f"DELETE FROM {TABLE_NAME}")
        else:
            _take_changed_ids(con, changes)
            counts.deleted = _one(con, "SELECT count(*) FROM state_removed_rows")
            con.execute(
                "CREATE OR REPLACE TEMP TABLE sync_removed_ids AS SELECT id FROM state_removed_rows"
            )
            con.execute("DROP TABLE state_removed_rows")

    steps.in_transaction(con, start)
    steps.checkpoint(con)
    if changes is None:
        batches = snap.rows()
    else:
        batches = snap.rows_named(0 if cursor is None else cursor.max_seq, ranges)
    with prefetch.prefetched(bulk.chunks(batches)) as chunks:
        copied = bulk.copy_in_steps(con, chunks, total, progress, memory_limit)
    aggregates.rebuild_in_steps(con)
    if changes is not None:
        seen: pa.Table | None = changes
    else:  # a rebuild: the log's gaps are what it has not got, none in a dense log,
        # where reading every seq to find that out cost 4 s and 1 GiB at 10M rows
        seen = None if snap.log_is_dense(horizon.max_seq) else snap.all_seqs()

    def finish() -> None:
        before = (0, 0) if cursor is None else (cursor.gaps_closed, cursor.gaps_expired)
        counts.closed = cursors.write_marks(
            con, snap, name, None if changes is None else cursor, horizon, seen, before
        )
        if changes is not None:  # rows held before and still there were updated
            counts.updated = _one(
                con,
                f"SELECT count(*) FROM {TABLE_NAME} WHERE id IN (SELECT id FROM sync_removed_ids)",
            )
            counts.added = copied - counts.updated
            counts.deleted -= counts.updated
        else:  # a rebuild: every row is copied afresh
            counts.added, counts.deleted = copied, 0
        con.execute("DROP TABLE IF EXISTS sync_ids")
        con.execute("DROP TABLE IF EXISTS sync_removed_ids")

    steps.in_transaction(con, finish)
    return counts


def sync(
    con: duckdb.DuckDBPyConnection,
    source: LedgerSource,
    *,
    full: bool = False,
    progress: bulk.ProgressCallback | None = None,
    memory_limit: str | None = None,
) -> SyncResult:
    """Bring the file's ``token_usage`` up to date with the ledger.

    ``memory_limit``: the DuckDB memory limit the file was opened with, if any (a bulk
    sync lowers it while it copies, see :func:`_copy_in_steps`).
    """
    with source.snapshot() as snap:
        return sync_snapshot(
            con,
            snap,
            display_url(source.url),
            full=full,
            progress=progress,
            memory_limit=memory_limit,
        )


def sync_snapshot(
    con: duckdb.DuckDBPyConnection,
    snap: LedgerSnapshot,
    name: str,
    *,
    full: bool = False,
    progress: bulk.ProgressCallback | None = None,
    memory_limit: str | None = None,
) -> SyncResult:
    """:func:`sync` to an open snapshot of the ledger ``name``: a caller that goes on
    reading it (``Analytics.verify``) sees exactly the ledger the copy now holds."""
    started = time.perf_counter()
    cursor = cursors.read_cursor(con)
    horizon = snap.horizon()
    rebuild = (
        full
        or cursor is None
        or cursor.source != name
        or horizon.max_seq < cursor.max_seq  # the log went backwards: a new ledger
    )
    if rebuild:
        total = snap.row_count()
        counts = _apply_in_steps(
            con,
            snap,
            name,
            cursor,
            gaps.Ranges(0, "", ""),
            None,
            horizon,
            total,
            progress,
            memory_limit,
        )
    else:
        assert cursor is not None
        ensure_aggregates(con)
        ranges = gaps.open_ranges(con)
        if horizon.max_seq == cursor.max_seq and not ranges.count:
            return _result(con, _Counts(), started, rebuilt=False)
        changes = snap.changes(cursor.max_seq, ranges)
        if not changes.num_rows and not gaps.closable(
            con, xmin=horizon.xmin, now=dt.datetime.now(dt.UTC)
        ):
            return _result(con, _Counts(), started, rebuilt=False)  # nothing to write
        held = _one(con, f"SELECT count(*) FROM {TABLE_NAME}")
        distinct = len(pc.unique(changes.column("row_id")))
        if distinct and distinct >= aggregates.REBUILD_SHARE * held:
            counts = _apply_in_steps(
                con, snap, name, cursor, ranges, changes, horizon, distinct, progress, memory_limit
            )
        else:
            counts = _apply_in_one_transaction(
                con, snap, cursor, ranges, changes, horizon, progress
            )
    return _result(con, counts, started, rebuilt=rebuild)


def _result(
    con: duckdb.DuckDBPyConnection, counts: _Counts, started: float, *, rebuilt: bool
) -> SyncResult:
    rows, last_id = con.execute(
        f"SELECT count(*), coalesce(max(id), 0) FROM {TABLE_NAME}"
    ).fetchall()[0]
    cursor = cursors.read_cursor(con)
    return SyncResult(
        rows_added=counts.added,
        last_id=int(last_id),
        rows_total=int(rows),
        seconds=time.perf_counter() - started,
        rebuilt=rebuilt,
        rows_updated=counts.updated,
        rows_deleted=counts.deleted,
        gaps_open=_one(con, "SELECT count(*) FROM ledger_gaps"),
        gaps_expired=0 if cursor is None else cursor.gaps_expired,
    )
