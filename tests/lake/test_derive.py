"""``ledger lake derive``: the lake's state tables, so its views read aggregates, not rows.

Real files, real DuckDB: a demo workload's ledger exported to a lake, derived,
and every view over the state compared row for row with the same view
computed from the rows and with the local analytics file's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import duckdb
import pytest
from sqlalchemy import delete

from ledger.analytics import Analytics
from ledger.analytics.models.views import VIEW_NAMES
from ledger.demo.runner import run_demo
from ledger.errors import LakeEmpty
from ledger.lake import duck
from ledger.lake.derive import (
    STATE_DIR,
    STATE_MANIFEST,
    StaleStateWarning,
    derive,
    missing_ranges,
)
from ledger.lake.export import export_lake
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from tests.analytics.builders import insert_rows, migrated_sqlite, served
from tests.lake.rows import differences, duck_rows

S = {"session_id": "s", "actor_id": "planner", "session_key": "k"}


class _Copy:
    """An :class:`Analytics` read as a DuckDB connection (what ``duck_rows`` calls)."""

    def __init__(self, analytics: Analytics) -> None:
        self.analytics = analytics

    def execute(self, query: str) -> duckdb.DuckDBPyRelation:
        return self.analytics.relation(query)


def _export(url: str, root: Path, lake: Path) -> None:
    with Analytics(url, path=root / "copy.duckdb") as analytics:
        export_lake(analytics, lake)


def _views_differ(con: Any, other: Any) -> list[str]:
    return [
        d
        for name in VIEW_NAMES
        if (d := differences(name, duck_rows(con, name), duck_rows(other, name)))
    ]


def _state_manifest(lake: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((lake / STATE_DIR / STATE_MANIFEST).read_text())
    return loaded


def _connect_quietly(lake: Path) -> duckdb.DuckDBPyConnection:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a stale state would warn: it must not
        return duck.connect(lake)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """A demo workload's ledger (sessions with and without the key, fallbacks, idle gaps)."""
    root = tmp_path_factory.mktemp("demo")
    url = migrated_sqlite(root / "ledger.db")
    run_demo(url, calls=800, seed=7)
    return url, root


def test_the_views_over_the_derived_state_equal_those_from_rows_and_the_analytics_file(
    demo: tuple[str, Path], tmp_path: Path
) -> None:
    url, root = demo
    lake = tmp_path / "lake"
    _export(url, root, lake)
    from_rows = duck.connect(lake)  # no state yet: every view from the rows
    result = derive(lake)
    assert (result.rebuilt, result.folded_rows, result.generation) == (True, result.total_rows, 1)
    over_state = _connect_quietly(lake)
    assert over_state.execute("SELECT count(*) FROM state_rollup").fetchone() != (0,)
    for figure in ("fallback_cost", "state_calls", "failed_attempts", "response_cache_models"):
        # the workload has fallbacks, calls of several rows and response-cache hits
        assert over_state.execute(f"SELECT count(*) FROM {figure}").fetchone() != (0,), figure
    assert _views_differ(over_state, from_rows) == []
    with Analytics(url, path=root / "copy.duckdb") as analytics:
        assert _views_differ(over_state, _Copy(analytics)) == []
    manifest = _state_manifest(lake)
    assert manifest["rows"] == result.total_rows and manifest["generation"] == 1
    assert sorted(manifest["tables"]) == sorted(
        p.stem for p in (lake / STATE_DIR / "g000001").iterdir()
    )


def test_a_derive_with_nothing_new_writes_nothing(demo: tuple[str, Path], tmp_path: Path) -> None:
    url, root = demo
    lake = tmp_path / "lake"
    _export(url, root, lake)
    derive(lake)
    before = {p: p.stat().st_mtime_ns for p in (lake / STATE_DIR).rglob("*")}
    again = derive(lake)
    assert (again.folded_rows, again.rebuilt, again.generation) == (0, False, 1)
    assert {p: p.stat().st_mtime_ns for p in (lake / STATE_DIR).rglob("*")} == before


def test_an_incremental_derive_after_a_second_export_equals_a_full_derive(
    tmp_path: Path,
) -> None:
    url = migrated_sqlite(tmp_path / "ledger.db")
    lake = tmp_path / "lake"
    run_demo(url, calls=800, seed=3)
    _export(url, tmp_path, lake)
    first = derive(lake)
    run_demo(url, calls=120, seed=4)  # the same agents' later sessions, and new ones
    _export(url, tmp_path, lake)
    with pytest.warns(StaleStateWarning, match="ledger lake derive"):
        stale = duck.connect(lake)  # the state is outgrown: the views come from rows
    second = derive(lake)
    assert not second.rebuilt and second.generation == 2
    assert second.folded_rows == second.total_rows - first.total_rows > 0
    assert [p.name for p in (lake / STATE_DIR).iterdir() if p.is_dir()] == ["g000002"]
    full = tmp_path / "full"
    shutil.copytree(lake, full, ignore=shutil.ignore_patterns(STATE_DIR))
    assert derive(full).rebuilt
    incremental = _connect_quietly(lake)
    assert _views_differ(incremental, _connect_quietly(full)) == []
    assert _views_differ(incremental, stale) == []


def test_a_late_row_exported_into_a_hole_is_folded_in(sqlite_url: str, tmp_path: Path) -> None:
    """Ids 1..10 exist, id 5 (another upstream) arrives late: the second derive folds it,
    into the session it sorts inside of."""
    lake = tmp_path / "lake"
    insert_rows(sqlite_url, [served(m, "A" if m != 4 else "B", **S) for m in range(10)])
    engine = make_engine(sqlite_url)
    with engine.begin() as conn:
        late = conn.execute(token_usage.select().where(token_usage.c.id == 5)).mappings().one()
        conn.execute(delete(token_usage).where(token_usage.c.id == 5))
    _export(sqlite_url, tmp_path, lake)
    assert derive(lake).folded_rows == 9
    with engine.begin() as conn:
        conn.execute(token_usage.insert().values(**late))
    engine.dispose()
    _export(sqlite_url, tmp_path, lake)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StaleStateWarning)
        from_rows = duck.connect(lake)
    result = derive(lake)
    assert (result.folded_rows, result.total_rows, result.rebuilt) == (1, 10, False)
    assert _views_differ(_connect_quietly(lake), from_rows) == []
    assert _state_manifest(lake)["exported_ids"] == [[1, 10]]
    switches = "SELECT sum(switches) FROM session_stickiness"
    assert _connect_quietly(lake).execute(switches).fetchone() == (2,)  # A -> B -> A


_KILLED_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import pyarrow.parquet as pq
    import ledger.lake.derive as derive

    real_writer = pq.ParquetWriter
    opened = []

    def dying_writer(*args, **kwargs):
        # the real writer, until the state's second table: then SIGKILL, mid-generation
        opened.append(1)
        if len(opened) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return real_writer(*args, **kwargs)

    derive.pq.ParquetWriter = dying_writer
    derive.derive(sys.argv[1])
    """
)


def _killed_derive(lake: Path) -> None:
    # its workspace goes beside the lake: a killed process leaves its temporary directory
    scratch = lake.parent / "scratch"
    scratch.mkdir(exist_ok=True)
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_CHILD, str(lake)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2]), "TMPDIR": str(scratch)},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr


def test_a_derive_killed_mid_write_leaves_the_previous_state_readable_and_stale(
    tmp_path: Path,
) -> None:
    lake = tmp_path / "lake"
    url = migrated_sqlite(tmp_path / "ledger.db")
    insert_rows(url, [served(m, "A", **S) for m in (0, 1, 2)])
    _export(url, tmp_path, lake)
    _killed_derive(lake)  # the first derive dies: no state is committed
    assert not (lake / STATE_DIR / STATE_MANIFEST).exists()
    from_rows = _connect_quietly(lake)  # no state, nothing stale: the rows
    assert from_rows.execute(
        "SELECT count(*) FROM duckdb_views() WHERE view_name = 'state_rollup'"
    ).fetchone() == (0,)
    derive(lake)
    insert_rows(url, [served(m, "B", **S) for m in (3, 4)])
    _export(url, tmp_path, lake)
    _killed_derive(lake)  # the second dies writing generation 2
    assert _state_manifest(lake)["generation"] == 1
    assert (lake / STATE_DIR / "g000002").exists()  # what it left, uncommitted
    with pytest.warns(StaleStateWarning, match="reflects 3 of the lake's 5 rows"):
        stale = duck.connect(lake)
    assert stale.execute("SELECT calls FROM overview_totals").fetchone() == (5,)
    result = derive(lake)  # removes the partial generation, folds the two new rows
    # two new rows of five: a rebuild, which folds the whole lake
    assert (result.new_rows, result.folded_rows, result.rebuilt) == (2, 5, True)
    assert result.generation == 2
    assert _views_differ(_connect_quietly(lake), stale) == []


def test_a_state_of_another_version_is_stale_and_derived_again(
    demo: tuple[str, Path], tmp_path: Path
) -> None:
    url, root = demo
    lake = tmp_path / "lake"
    _export(url, root, lake)
    derive(lake)
    path = lake / STATE_DIR / STATE_MANIFEST
    path.write_text(path.read_text().replace('"state_version": ', '"state_version": 1000'))
    with pytest.warns(StaleStateWarning, match="another version"):
        duck.connect(lake)
    assert derive(lake).rebuilt
    _connect_quietly(lake)


def test_an_empty_or_missing_lake_cannot_be_derived(tmp_path: Path) -> None:
    with pytest.raises(LakeEmpty, match=r"run `ledger export .*` first"):
        derive(tmp_path / "nowhere")
    assert not (tmp_path / "nowhere").exists()


def test_missing_ranges_are_the_lake_ids_the_state_does_not_hold() -> None:
    assert missing_ranges(((1, 10),), ((1, 10),)) == []
    assert missing_ranges(((1, 10),), ((1, 4),)) == [(5, 10)]
    assert missing_ranges(((1, 10), (20, 30)), ((1, 3), (6, 10))) == [(4, 5), (20, 30)]
    assert missing_ranges(((1, 12),), ()) == [(1, 12)]
