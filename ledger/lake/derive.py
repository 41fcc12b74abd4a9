"""``ledger lake derive``: the analytics state tables of a lake, kept beside it as Parquet.

The views computed from a lake's rows read every row on every query: minutes
at 100M rows. The local analytics file avoids that with state tables folded
incrementally (:mod:`ledger.analytics.state.aggregates`) and stored variants of the
heavy views that read them (``ledger/analytics/sql/stored/``). This module
gives a lake the same: :func:`derive` runs ``aggregates``' own fold over a
DuckDB connection where ``token_usage`` is the lake's committed rows, and
writes every state table as Parquet through ``pyarrow.fs`` (local path or
object store, as the lake itself)::

    <lake>/_state/_state_manifest.json        the commit point: what the state reflects
    <lake>/_state/g000002/state_calls.parquet one file per state table, one generation

Commit: a derive writes a new generation directory, then replaces the state
manifest (written aside and moved over, as the lake's manifest is), then
deletes the older generations. A derive killed before the move leaves the
previous manifest and its generation intact; the next derive deletes the
uncommitted directory. The manifest records the lake's exported id ranges
and row count the state reflects, and the state version of ``aggregates``:

- :func:`current` tells a reader whether the state matches the lake's
  manifest now (no row is read); a stale state is announced with a
  :class:`StaleStateWarning` naming ``ledger lake derive``, and the reader
  computes from rows (:mod:`ledger.lake.duck`, :mod:`ledger.lake.spark`).
- A derive after an export folds only the rows the state does not reflect
  (ids in the lake's ranges but not the state's: new ids, and late rows in
  holes) through ``aggregates.fold_changes``, the analytics copy's
  incremental path; with nothing new it writes nothing. A state of another
  version, or new rows past ``aggregates.REBUILD_SHARE`` of the lake, is
  rebuilt in id chunks (``aggregates.rebuild_in_steps``).

The fold runs in a DuckDB database in a local temporary directory, which
DuckDB spills to and checkpoints after each chunk, so memory stays bounded
however large the lake.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import duckdb
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from ledger.analytics.state import aggregates, clusters
from ledger.errors import LakeEmpty
from ledger.lake import manifest as mf
from ledger.lake.export import check_not_a_file, lake_schema, open_target
from ledger.schema import TABLE_NAME

#: A leading underscore: Spark, Hive and pyarrow.dataset skip such paths, so the lake
#: still reads as one table of rows partitioned by day (as `ledger export` documents).
STATE_DIR: Final = "_state"
STATE_MANIFEST: Final = "_state_manifest.json"
FORMAT: Final = "ledger-lake-state"
#: Every table a state holds, as :mod:`ledger.analytics.state.aggregates` names them.
TABLES: Final = (*aggregates.STATE_TABLES, *clusters.TABLES)
#: Rows per Parquet batch written.
_BATCH_ROWS: Final = 1_000_000

#: ``progress(step)``: a line saying what the derive is doing.
DeriveProgress = Callable[[str], None]


class StaleStateWarning(UserWarning):
    """The lake has rows its derived state does not reflect: the views read rows instead."""


@dataclass(frozen=True, slots=True)
class State:
    """A committed state: its generation, the tables' files and the lake rows it reflects."""

    generation: int
    state_version: int
    rows: int
    exported: tuple[mf.IdRange, ...]
    updated_at: dt.datetime | None = field(default=None, compare=False)

    @property
    def directory(self) -> str:
        return f"{STATE_DIR}/g{self.generation:06d}"

    def path(self, table: str) -> str:
        return f"{self.directory}/{table}.parquet"

    def reflects(self, manifest: mf.Manifest) -> bool:
        return (
            self.state_version == aggregates.STATE_VERSION
            and self.exported == manifest.exported
            and self.rows == manifest.rows
        )


@dataclass(frozen=True, slots=True)
class DeriveResult:
    target: str
    new_rows: int  # lake rows the state did not reflect before (0: nothing written)
    folded_rows: int  # lake rows this run folded: the new ones, or the whole lake (rebuilt)
    total_rows: int
    rebuilt: bool
    generation: int


def _to_json(state: State) -> str:
    return json.dumps(
        {
            "format": FORMAT,
            "state_version": state.state_version,
            "generation": state.generation,
            "updated_at": state.updated_at.isoformat() if state.updated_at else None,
            "rows": state.rows,
            "max_id": state.exported[-1][1] if state.exported else None,
            "exported_ids": [list(r) for r in state.exported],
            "tables": {t: state.path(t) for t in TABLES},
        },
        indent=1,
    )


def read_state(filesystem: pafs.FileSystem, root: str) -> State | None:
    """The committed state of the lake at ``root``, None when there is none (or not ours)."""
    path = f"{root}/{STATE_DIR}/{STATE_MANIFEST}"
    if filesystem.get_file_info(path).type == pafs.FileType.NotFound:
        return None
    with filesystem.open_input_stream(path) as stream:
        data = json.loads(stream.read().decode("utf-8"))
    if data.get("format") != FORMAT:
        return None
    updated = data.get("updated_at")
    return State(
        generation=int(data["generation"]),
        state_version=int(data["state_version"]),
        rows=int(data["rows"]),
        exported=tuple((int(lo), int(hi)) for lo, hi in data["exported_ids"]),
        updated_at=dt.datetime.fromisoformat(updated) if updated else None,
    )


def current(
    filesystem: pafs.FileSystem, root: str, manifest: mf.Manifest, *, target: str
) -> State | None:
    """The lake's state when it reflects exactly the rows ``manifest`` commits, else None;
    a state that does not (the lake grew since, or an older version) is warned about."""
    state = read_state(filesystem, root)
    if state is None or state.reflects(manifest):
        return state
    if state.state_version != aggregates.STATE_VERSION:
        why = f"was derived by another version (state version {state.state_version})"
    else:
        why = f"reflects {state.rows:,} of the lake's {manifest.rows:,} rows"
    warnings.warn(
        f"the derived state of {target} {why}: the views are computed from the rows "
        f"(slow on a large lake); run `ledger lake derive {target}` to bring it up to date",
        StaleStateWarning,
        stacklevel=3,
    )
    return None


def lake_dataset(filesystem: pafs.FileSystem, root: str, manifest: mf.Manifest) -> pads.Dataset:
    """The committed rows of the lake as one Arrow dataset."""
    paths = [f"{root}/{f.path}" for f in manifest.files]
    return pads.dataset(paths, schema=lake_schema(), filesystem=filesystem, format="parquet")


def register_rows(
    con: duckdb.DuckDBPyConnection,
    filesystem: pafs.FileSystem,
    root: str,
    manifest: mf.Manifest,
) -> None:
    """``token_usage`` in ``con``: the lake's committed files.

    On a local disk DuckDB reads them with its own Parquet reader (a scan of
    100M rows several times faster than through Arrow, in parallel, with
    statistics), unless an older file lacks a column (the Arrow dataset then
    fills it with NULLs); elsewhere through ``pyarrow.dataset``, which reads any
    ``pyarrow.fs`` target without DuckDB extensions.
    """
    paths = [f"{root}/{f.path}" for f in manifest.files]
    if isinstance(filesystem, pafs.LocalFileSystem) and paths:
        rows = con.read_parquet(paths, hive_partitioning=False, union_by_name=True)
        if set(lake_schema().names) <= set(rows.columns):
            rows.create_view(TABLE_NAME)
            return
    con.register(TABLE_NAME, lake_dataset(filesystem, root, manifest))


def register_state(
    con: duckdb.DuckDBPyConnection, filesystem: pafs.FileSystem, root: str, state: State
) -> None:
    """Every state table of ``state`` in ``con``, by its name (read as :func:`register_rows`)."""
    for table in TABLES:
        _register_table(con, table, filesystem, f"{root}/{state.path(table)}")


def _register_table(
    con: duckdb.DuckDBPyConnection, name: str, filesystem: pafs.FileSystem, path: str
) -> None:
    if isinstance(filesystem, pafs.LocalFileSystem):
        con.read_parquet(path).create_view(name)
    else:
        con.register(name, pads.dataset(path, filesystem=filesystem, format="parquet"))


def lake_manifest(filesystem: pafs.FileSystem, root: str, target: str | Path) -> mf.Manifest:
    """The manifest of the lake at ``target`` (it may commit no rows yet); a path
    ``ledger export`` never wrote is :class:`LakeEmpty`, a file :class:`LakeTargetError`:
    a wrong path would otherwise read as a lake of no rows."""
    check_not_a_file(filesystem, root, target)
    if filesystem.get_file_info(f"{root}/{mf.MANIFEST_NAME}").type == pafs.FileType.NotFound:
        raise _empty(filesystem, root, target)
    return mf.read(filesystem, root)


def _empty(filesystem: pafs.FileSystem, root: str, target: str | Path) -> LakeEmpty:
    found = filesystem.get_file_info(root).type != pafs.FileType.NotFound
    what = (
        f"holds no exported rows (no {mf.MANIFEST_NAME}, or an empty one)"
        if found
        else "does not exist"
    )
    return LakeEmpty(
        f"{target} {what}: run `ledger export {target}` first, or give the directory it wrote",
        target=str(target),
    )


def derive(target: str | Path, *, progress: DeriveProgress | None = None) -> DeriveResult:
    """Bring the derived state of the lake at ``target`` up to its committed rows."""
    say = progress or (lambda _: None)
    filesystem, root = open_target(target)
    manifest = lake_manifest(filesystem, root, target)
    if manifest.rows == 0:
        raise _empty(filesystem, root, target)
    state = read_state(filesystem, root)
    _remove_uncommitted(filesystem, root, state)
    if state is not None and state.reflects(manifest):
        return DeriveResult(str(target), 0, 0, manifest.rows, False, state.generation)
    usable = state is not None and state.state_version == aggregates.STATE_VERSION
    with _workspace(filesystem, root, manifest) as con:
        new = manifest.rows - (state.rows if usable and state else 0)
        rebuild = not usable or new >= aggregates.REBUILD_SHARE * manifest.rows
        if rebuild:
            say(f"folding {manifest.rows:,} rows (the whole lake)")
            aggregates.rebuild_in_steps(con)
        else:
            assert state is not None
            say(f"folding {new:,} new rows into the state of {state.rows:,}")
            _load(con, filesystem, root, state)
            new = _fold_new(con, state, manifest)
        generation = (state.generation if state else 0) + 1
        committed = State(
            generation,
            aggregates.STATE_VERSION,
            manifest.rows,
            manifest.exported,
            dt.datetime.now(dt.UTC),
        )
        say("writing the state tables")
        _write(con, filesystem, root, committed)
    _remove_uncommitted(filesystem, root, committed)
    folded = manifest.rows if rebuild else new
    return DeriveResult(str(target), new, folded, manifest.rows, rebuild, generation)


@contextlib.contextmanager
def _workspace(
    filesystem: pafs.FileSystem, root: str, manifest: mf.Manifest
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A DuckDB database in a temporary directory with ``token_usage`` the lake's rows."""
    with tempfile.TemporaryDirectory(prefix="ledger-derive-") as work:
        con = duckdb.connect(str(Path(work) / "state.duckdb"))
        try:
            con.execute("SET TimeZone = 'UTC'")
            con.execute("SET temp_directory = $dir", {"dir": str(Path(work) / "spill")})
            register_rows(con, filesystem, root, manifest)
            aggregates.ensure_tables(con)
            yield con
        finally:
            con.close()


def _load(
    con: duckdb.DuckDBPyConnection, filesystem: pafs.FileSystem, root: str, state: State
) -> None:
    """The committed state's tables into the workspace, and its ``state_meta``."""
    for table in TABLES:
        _register_table(con, "state_loaded", filesystem, f"{root}/{state.path(table)}")
        con.execute(f"INSERT INTO {table} SELECT * FROM state_loaded")  # noqa: S608
        con.execute("DROP VIEW state_loaded")
    max_id = state.exported[-1][1] if state.exported else None
    con.execute(
        "INSERT INTO state_meta VALUES (?, ?, ?)", [state.state_version, state.rows, max_id]
    )


# The lake rows in ranges the state does not reflect ($lo/$hi: parallel lists of bounds).
_NEW_ROWS: Final = f"""
CREATE OR REPLACE TEMP TABLE state_new_rows AS
SELECT t.* FROM {TABLE_NAME} AS t
JOIN (SELECT unnest(CAST($lo AS BIGINT[])) AS lo, unnest(CAST($hi AS BIGINT[])) AS hi) AS r
    ON t.id BETWEEN r.lo AND r.hi
"""  # noqa: S608


def _fold_new(con: duckdb.DuckDBPyConnection, state: State, manifest: mf.Manifest) -> int:
    """Fold the rows the lake holds and the state does not, with the sync's own fold."""
    ranges = missing_ranges(manifest.exported, state.exported)
    con.execute(_NEW_ROWS, {"lo": [lo for lo, _ in ranges], "hi": [hi for _, hi in ranges]})
    con.execute(f"CREATE OR REPLACE TEMP TABLE state_removed_rows AS FROM {TABLE_NAME} LIMIT 0")
    (new,) = con.execute("SELECT count(*) FROM state_new_rows").fetchall()[0]
    aggregates.fold_changes(con)
    con.execute("DROP TABLE state_new_rows")
    con.execute("DROP TABLE state_removed_rows")
    return int(new)


def missing_ranges(lake: tuple[mf.IdRange, ...], held: tuple[mf.IdRange, ...]) -> list[mf.IdRange]:
    """The id ranges of ``lake`` that ``held`` does not cover (both merged and sorted)."""
    out: list[mf.IdRange] = []
    for lo, hi in lake:
        start = lo
        for h_lo, h_hi in held:
            if h_hi < start or h_lo > hi:
                continue
            if h_lo > start:
                out.append((start, h_lo - 1))
            start = max(start, h_hi + 1)
        if start <= hi:
            out.append((start, hi))
    return out


def _write(
    con: duckdb.DuckDBPyConnection, filesystem: pafs.FileSystem, root: str, state: State
) -> None:
    """Every state table into the new generation, then the manifest naming it (the commit)."""
    filesystem.create_dir(f"{root}/{state.directory}", recursive=True)
    for table in TABLES:
        reader = con.sql(f"SELECT * FROM {table}").to_arrow_reader(_BATCH_ROWS)  # noqa: S608
        with (
            filesystem.open_output_stream(f"{root}/{state.path(table)}") as stream,
            pq.ParquetWriter(stream, reader.schema, compression="zstd") as writer,
        ):
            for batch in reader:
                writer.write_batch(batch)
    path = f"{root}/{STATE_DIR}/{STATE_MANIFEST}"
    staging = f"{root}/{STATE_DIR}/_{STATE_MANIFEST}.tmp"
    with filesystem.open_output_stream(staging) as stream:
        stream.write(_to_json(state).encode("utf-8"))
    filesystem.move(staging, path)


def _remove_uncommitted(filesystem: pafs.FileSystem, root: str, state: State | None) -> None:
    """Delete every generation but the committed one (older ones, or one a derive left)."""
    keep = f"{root}/{state.directory}" if state else None
    selector = pafs.FileSelector(f"{root}/{STATE_DIR}", allow_not_found=True)
    for info in filesystem.get_file_info(selector):
        if info.type == pafs.FileType.Directory and info.path != keep:
            filesystem.delete_dir(info.path)
