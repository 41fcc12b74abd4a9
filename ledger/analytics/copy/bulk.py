"""Rows copied into the DuckDB file in bulk: Arrow chunks of whole row groups, in steps.

A bulk sync (the first, a rebuild, a large backlog) inserts millions of rows;
:func:`copy_in_steps` commits and checkpoints every :data:`CHECKPOINT_ROWS`
so DuckDB's memory stays bounded (:mod:`ledger.analytics.copy.sync` drives it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

import duckdb
import pyarrow as pa

from ledger.analytics.copy.local import insert_sql
from ledger.analytics.state import steps

#: ``progress(rows_done, rows_total)``, called after each chunk of a sync.
ProgressCallback = Callable[[int, int], None]
#: Rows per INSERT into DuckDB: fewer, larger statements amortise planning, and
#: whole row groups (122,880 rows) are written to the file as they are inserted,
#: where a chunk ending mid-group leaves every group to be rewritten at the checkpoint.
CHUNK_ROWS: Final = 2 * 122_880
#: Rows a bulk sync copies between two checkpoints (see :func:`_apply_in_steps`).
CHECKPOINT_ROWS: Final = 2_000_000

#: DuckDB's memory limit while a bulk sync copies rows (see :func:`_copy_in_steps`):
#: at 10M rows the copy peaked at 2.03 GiB of RSS with 1 GiB, 1.96 with 768 MiB,
#: 1.78 with 512 MiB (the rest is the Arrow chunks in flight and Arrow's allocator).
COPY_MEMORY_LIMIT: Final = "512MiB"


def _without_sentinel(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The batches less the SQLite read's leading sentinel row (id -1), so that the
    chunks hold exactly the rows inserted (the INSERT drops it too, for other callers)."""
    first = True
    for batch in batches:
        if first and batch.num_rows and batch.column("id")[0].as_py() < 0:
            batch = batch.slice(1)
        first = False
        if batch.num_rows:
            yield batch


def chunks(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.Table]:
    """The rows in tables of exactly CHUNK_ROWS (the last one fewer): slices, not copies."""
    pending: list[pa.RecordBatch] = []
    size = 0
    for batch in _without_sentinel(batches):
        pending.append(batch)
        size += batch.num_rows
        if size >= CHUNK_ROWS:
            table = pa.Table.from_batches(pending)
            cut = size - size % CHUNK_ROWS
            for start in range(0, cut, CHUNK_ROWS):
                yield table.slice(start, CHUNK_ROWS)
            pending = table.slice(cut).to_batches()
            size = size - cut
    if size:
        yield pa.Table.from_batches(pending)


def _arrow_kinds(schema: pa.Schema) -> dict[str, str]:
    return {
        f.name: "string" if pa.types.is_string(f.type) or pa.types.is_large_string(f.type) else ""
        for f in schema
    }


def insert(con: duckdb.DuckDBPyConnection, chunk: pa.Table) -> int:
    """Insert a chunk of rows (the copy holds none of them); how many."""
    con.register("ledger_incoming", chunk)
    try:
        rows = con.execute(insert_sql(_arrow_kinds(chunk.schema), "ledger_incoming")).fetchall()
    finally:
        con.unregister("ledger_incoming")
    return int(rows[0][0]) if rows else 0


def copy_in_steps(
    con: duckdb.DuckDBPyConnection,
    chunks: Iterator[pa.Table],
    total: int,
    progress: ProgressCallback | None,
    memory_limit: str | None,
) -> int:
    """Insert the chunks, one transaction and one checkpoint per CHECKPOINT_ROWS; rows inserted.

    A transaction per step rather than per chunk: each commit writes to the WAL,
    and at a quarter of a million rows a chunk those commits cost as much as the
    inserts. Memory is bounded by the checkpoints, as before.

    One DuckDB thread inserts: two split each chunk's Arrow batches between them,
    leave part-filled row groups that the checkpoint then compresses again, and
    cost more CPU in all (2M rows: 5.4 s to insert + 0.9-2.3 s to checkpoint,
    against 4.8 s + 0 s). Reading runs on a thread of its own
    (:mod:`ledger.analytics.copy.prefetch`).
    """
    copied, more = 0, True

    def step() -> None:
        nonlocal copied, more
        read = 0
        for chunk in chunks:  # resumes where the previous step stopped
            copied += insert(con, chunk)
            read += chunk.num_rows
            if progress is not None:
                progress(min(copied, total), total)
            if read >= CHECKPOINT_ROWS:
                return
        more = False

    # DuckDB keeps the blocks it wrote cached up to its memory limit; the copy reads
    # none of them again, and the Arrow chunks need the room (peak RSS at 10M rows).
    with (
        steps.one_thread(con),
        steps.memory_at_most(con, COPY_MEMORY_LIMIT, memory_limit),
    ):
        while more:
            steps.in_transaction(con, step)
            steps.checkpoint(con)
    return copied
