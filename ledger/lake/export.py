"""``ledger export``: the analytics copy as an incremental, Hive-partitioned Parquet lake.

Layout, readable as one partitioned table by DuckDB, Spark, Trino or ClickHouse::

    <lake>/_ledger_manifest.json                     what is committed (ledger.lake.manifest)
    <lake>/date=2025-01-31/part-000000000001.parquet the rows of one export run for that UTC day

Each run writes only rows whose ids no committed file holds: the ids above the
manifest's highest one, and late rows that landed in its holes. Re-running
with nothing new writes nothing. Every file is written under a hidden name
(``_….tmp``: DuckDB's ``*.parquet`` glob and Spark's file listing both skip
it), moved to its final name when complete, then committed in the manifest;
a run killed at any point leaves no partial file visible, and at most one
complete, uncommitted file, which the next run deletes before it starts.

The schema is :func:`lake_schema`: the columns of ``token_usage``
(:mod:`ledger.schema`) with fixed Arrow types, the day in the path. Columns
are only ever added, so readers merging schemas by name read old and new files
together.

A lake holds one ledger's rows. Before writing, a run checks that the ledger
it reads is the one the lake came from (the event ids of the newest files'
highest rows, see :mod:`ledger.lake.manifest`) and refuses another one with
:class:`~ledger.errors.LakeTargetError`: its ids would look exported already and
its rows would be skipped without a word.

The lake receives facts as exported: a row deleted or repriced in the ledger
afterwards keeps its exported values here. Export into a new target to take a
fresh picture.

Targets are opened with ``pyarrow.fs``: a local path, or an object-store URI
(``s3://bucket/prefix``, ``gs://bucket/prefix``, credentials from the usual
environment of those SDKs).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs
from sqlalchemy import BigInteger, SmallInteger

from ledger.analytics.copy.source import column_kind
from ledger.errors import LakeTargetError
from ledger.lake import manifest as mf
from ledger.schema import TABLE_NAME, token_usage

PARTITION: Final = "date"
BATCH_ROWS: Final = 256_000
#: Files whose anchors a run checks: the newest ones, whose rows retention keeps longest.
ANCHOR_FILES: Final = 8

#: ``progress(rows_written, rows_to_write)``
ExportProgress = Callable[[int, int], None]


class RowSource(Protocol):
    """Where the rows come from: :class:`ledger.analytics.Analytics` (its synced copy)."""

    def relation(
        self, query: str, parameters: Mapping[str, object] | None = None
    ) -> duckdb.DuckDBPyRelation: ...


@dataclass(frozen=True, slots=True)
class ExportResult:
    target: str
    new_rows: int
    new_files: int
    total_rows: int
    removed_uncommitted: int


def lake_schema() -> pa.Schema:
    """The Arrow schema of every lake file, derived from :mod:`ledger.schema`."""
    return pa.schema(
        [pa.field(c.name, _arrow_type(c), nullable=c.nullable) for c in token_usage.columns]
    )


def _arrow_type(column: object) -> pa.DataType:
    kind = column_kind(column)
    col_type = getattr(column, "type", None)
    if kind == "int":
        if isinstance(col_type, BigInteger) or getattr(column, "name", "") == "id":
            return pa.int64()
        return pa.int16() if isinstance(col_type, SmallInteger) else pa.int32()
    if kind == "decimal":
        impl = getattr(col_type, "impl", col_type)
        return pa.decimal128(impl.precision, impl.scale)  # type: ignore[union-attr]
    return {
        "bool": pa.bool_(),
        "float": pa.float64(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "json": pa.string(),
        "text": pa.string(),
    }[kind]


def open_target(target: str | Path) -> tuple[pafs.FileSystem, str]:
    """The filesystem and root path of a local path or an object-store URI."""
    text = str(target)
    if "://" not in text:
        text = str(Path(text).expanduser().resolve())
    filesystem, root = pafs.FileSystem.from_uri(text)
    return filesystem, root.rstrip("/")


def check_not_a_file(filesystem: pafs.FileSystem, root: str, target: str | Path) -> None:
    """Raise :class:`LakeTargetError` when ``target`` is a file: a lake is a directory."""
    if filesystem.get_file_info(root).type == pafs.FileType.File:
        raise LakeTargetError(
            f"{target} is a file; a lake is a directory (or an object-store prefix) that "
            "`ledger export` writes",
            target=str(target),
        )


def export_lake(
    analytics: RowSource,
    target: str | Path,
    *,
    progress: ExportProgress | None = None,
) -> ExportResult:
    """Append the rows of ``analytics``' copy that the lake at ``target`` does not hold yet."""
    filesystem, root = open_target(target)
    check_not_a_file(filesystem, root, target)
    try:
        filesystem.create_dir(root, recursive=True)
    except OSError as exc:  # no permission, a file further up the path…
        message = f"cannot write a lake at {target}: {exc}"
        raise LakeTargetError(message, target=str(target)) from exc
    manifest = mf.read(filesystem, root)
    _check_same_ledger(analytics, filesystem, root, manifest, target)
    removed = _remove_uncommitted(filesystem, root, manifest)
    # The run selects against the manifest as it was at the start: each day it
    # commits raises the manifest's highest id past rows of later days.
    selection = _selection(manifest)
    days = analytics.relation(_NEW_DAYS, selection).fetchall()
    total = sum(int(n) for _, n in days)
    written = 0
    for day, _ in days:
        rows = analytics.relation(_DAY_ROWS, {**selection, "day": day})
        for batch_rows, committed in _write_day(rows, filesystem, root, manifest, day):
            written += batch_rows
            manifest = committed
            if progress is not None:
                progress(written, total)
    return ExportResult(
        target=str(target),
        new_rows=written,
        new_files=len(days),  # one file per day per run
        total_rows=manifest.rows,
        removed_uncommitted=removed,
    )


# The rows to export: above the manifest's highest id, or in one of its holes
# (two parallel lists of range bounds). started_at AT TIME ZONE 'UTC' is the
# naive UTC wall time, so the day is the UTC day whatever the time zone.
_HOLE_ROWS: Final = f"""
SELECT t.* FROM {TABLE_NAME} AS t
JOIN (
  SELECT unnest(CAST($hole_lo AS BIGINT[])) AS lo, unnest(CAST($hole_hi AS BIGINT[])) AS hi
) AS h ON t.id BETWEEN h.lo AND h.hi
"""  # noqa: S608
_NEW_ROWS: Final = f"""
SELECT t.* FROM {TABLE_NAME} AS t WHERE t.id > $max_id
UNION ALL
{_HOLE_ROWS}
"""  # noqa: S608
_NEW_DAYS: Final = f"""
SELECT CAST(started_at AT TIME ZONE 'UTC' AS DATE) AS day, count(*)
FROM ({_NEW_ROWS}) GROUP BY 1 ORDER BY 1
"""  # noqa: S608
# A day's rows by a started_at range, which DuckDB's zone maps prune, not by
# the day computed from every row.
_DAY_ROWS: Final = f"""
SELECT * FROM ({_NEW_ROWS})
WHERE started_at >= timezone('UTC', CAST($day AS TIMESTAMP))
  AND started_at < timezone('UTC', CAST($day AS TIMESTAMP) + INTERVAL 1 DAY)
ORDER BY id
"""  # noqa: S608


# The anchors' rows as the ledger holds them (few ids; the id range lets zone maps skip).
_ANCHOR_ROWS: Final = f"""
SELECT id, event_id FROM {TABLE_NAME}
WHERE id BETWEEN list_min($ids) AND list_max($ids) AND list_contains($ids, id)
"""  # noqa: S608
# Whether the ledger holds any row under an id the lake holds (not in one of its holes).
_HOLDS_EXPORTED_ID: Final = f"""
SELECT count(*) FROM (
  SELECT id FROM {TABLE_NAME} WHERE id <= $max_id EXCEPT SELECT id FROM ({_HOLE_ROWS}) LIMIT 1
)
"""  # noqa: S608


def _check_same_ledger(
    analytics: RowSource,
    filesystem: pafs.FileSystem,
    root: str,
    manifest: mf.Manifest,
    target: str | Path,
) -> None:
    """Raise :class:`LakeTargetError` when ``analytics`` reads another ledger than the lake's.

    The ledger must hold the newest files' anchors under their ids; with none of
    them there, it must hold no row under an exported id at all (then every row it
    has is new to the lake, and nothing is skipped)."""
    anchors = _anchors(filesystem, root, manifest)
    if not anchors:
        return
    held = dict(analytics.relation(_ANCHOR_ROWS, {"ids": list(anchors)}).fetchall())
    for row_id, event_id in anchors.items():
        if row_id in held and held[row_id] != event_id:
            why = f"row {row_id} is event {event_id} there, {held[row_id]} in this ledger"
            raise _another_ledger(target, why)
    if held:
        return
    (exported,) = analytics.relation(_HOLDS_EXPORTED_ID, _selection(manifest)).fetchall()[0]
    if exported:
        why = "this ledger has rows under its ids but none of its newest rows"
        raise _another_ledger(target, why)


def _another_ledger(target: str | Path, why: str) -> LakeTargetError:
    return LakeTargetError(
        f"{target} holds another ledger's rows ({why}): its ids would look exported "
        "already and this ledger's rows would be skipped. Export each ledger into a "
        "target of its own",
        target=str(target),
    )


def _anchors(filesystem: pafs.FileSystem, root: str, manifest: mf.Manifest) -> dict[int, str]:
    """``max_id -> event_id`` of the newest :data:`ANCHOR_FILES` files; a file committed
    before the manifest kept anchors gives its highest row's event id from its data."""
    newest = sorted(manifest.files, key=lambda f: f.max_id)[-ANCHOR_FILES:]
    return {f.max_id: f.anchor or _anchor_in_file(filesystem, root, f) for f in newest}


def _anchor_in_file(filesystem: pafs.FileSystem, root: str, entry: mf.LakeFile) -> str:
    table = pq.read_table(
        f"{root}/{entry.path}",
        filesystem=filesystem,
        columns=["event_id"],
        filters=[("id", "=", entry.max_id)],
    )
    return str(table.column("event_id")[0].as_py())


def _selection(manifest: mf.Manifest) -> dict[str, object]:
    holes = manifest.holes()
    return {
        "max_id": manifest.max_id,
        "hole_lo": [lo for lo, _ in holes],
        "hole_hi": [hi for _, hi in holes],
    }


def _write_day(
    rows: duckdb.DuckDBPyRelation,
    filesystem: pafs.FileSystem,
    root: str,
    manifest: mf.Manifest,
    day: dt.date,
) -> Iterator[tuple[int, mf.Manifest]]:
    """Write one day's new rows as one file, commit it; yields (rows, manifest) per batch."""
    schema = lake_schema()
    reader = rows.to_arrow_reader(BATCH_ROWS)
    directory = f"{root}/{PARTITION}={day.isoformat()}"
    filesystem.create_dir(directory, recursive=True)
    runs: list[mf.IdRange] = []
    written = 0
    anchor = ""  # the event id of the highest id: the last row, as rows come by id
    staging = f"{directory}/_export.parquet.tmp"
    with (
        filesystem.open_output_stream(staging) as stream,
        pq.ParquetWriter(stream, schema, compression="zstd") as writer,
    ):
        for batch in _nonempty(reader):
            table = pa.Table.from_batches([batch]).cast(schema)
            writer.write_table(table)
            runs = [*mf.merge_ranges([*runs, *_runs(table.column("id"))])]
            written += table.num_rows
            anchor = str(table.column("event_id")[-1].as_py())
            yield table.num_rows, manifest
    if not written:  # the day's rows went away between counting and reading
        filesystem.delete_file(staging)
        return
    name = f"part-{runs[0][0]:012d}.parquet"
    filesystem.move(staging, f"{directory}/{name}")
    entry = mf.LakeFile(
        f"{PARTITION}={day.isoformat()}/{name}", day, written, runs[0][0], runs[-1][1], anchor
    )
    manifest = manifest.committed(entry, runs)
    mf.write(filesystem, root, manifest)
    yield 0, manifest


def _runs(ids: pa.ChunkedArray) -> list[mf.IdRange]:
    """Consecutive runs of an ascending id column, computed without a Python loop per id."""
    values = ids.to_numpy()
    breaks = np.flatnonzero(np.diff(values) != 1)
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [len(values) - 1]))
    return [(int(values[a]), int(values[b])) for a, b in zip(starts, ends, strict=True)]


def _nonempty(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    for batch in reader:
        if batch.num_rows:
            yield batch


def _remove_uncommitted(filesystem: pafs.FileSystem, root: str, manifest: mf.Manifest) -> int:
    """Delete data files the manifest does not list (a run died before committing them)."""
    committed = {f.path for f in manifest.files}
    removed = 0
    selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
    for info in filesystem.get_file_info(selector):
        if info.type != pafs.FileType.File:
            continue
        relative = info.path[len(root) + 1 :]
        if not relative.startswith(f"{PARTITION}="):
            continue
        if relative.endswith(".tmp") or relative not in committed:
            filesystem.delete_file(info.path)
            removed += 1
    return removed
