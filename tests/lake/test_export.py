"""``ledger export``: an incremental, Hive-partitioned lake with a manifest, safe to kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from sqlalchemy import delete

from ledger.analytics import Analytics
from ledger.cli import cli
from ledger.errors import LakeEmpty, LakeTargetError
from ledger.lake import duck
from ledger.lake.export import export_lake, lake_schema
from ledger.lake.manifest import MANIFEST_NAME, Manifest, merge_ranges
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from tests.analytics.builders import insert_rows, migrated_sqlite, served

S = {"session_id": "s", "actor_id": "planner", "session_key": "k"}


def visible_files(lake: Path) -> list[str]:
    """What a reader globbing ``*/*.parquet`` sees."""
    return sorted(str(p.relative_to(lake)) for p in lake.glob("*/*.parquet"))


def lake_rows(lake: Path) -> list[tuple[int, str, Decimal]]:
    with duckdb.connect() as con:
        return con.execute(
            f"SELECT id, CAST(date AS VARCHAR), cost_usd FROM read_parquet('{lake}/*/*.parquet', "
            "hive_partitioning = true) ORDER BY id"
        ).fetchall()


@pytest.fixture
def analytics(ledger_url: str, tmp_path: Path) -> Analytics:
    return Analytics(ledger_url, path=tmp_path / "copy.duckdb")


def test_a_second_export_writes_nothing_and_new_rows_land_in_their_day(
    ledger_url: str, analytics: Analytics, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    insert_rows(ledger_url, [served(0, "A", cost_usd=Decimal("0.25"), **S), served(1, "A", **S)])
    analytics.refresh()
    first = export_lake(analytics, lake)
    assert (first.new_rows, first.new_files, first.total_rows) == (2, 1, 2)
    files = visible_files(lake)
    assert files == [files[0]] and files[0].startswith("date=2025-03-01/part-")

    again = export_lake(analytics, lake)
    assert (again.new_rows, again.new_files, again.total_rows) == (0, 0, 2)
    assert visible_files(lake) == files

    insert_rows(ledger_url, [served(1500, "B", cost_usd=Decimal("1"), **S)])  # the next day
    analytics.refresh()
    third = export_lake(analytics, lake)
    assert (third.new_rows, third.new_files, third.total_rows) == (1, 1, 3)
    assert [(d, c) for _, d, c in lake_rows(lake)] == [
        ("2025-03-01", Decimal("0.25")),
        ("2025-03-01", None),
        ("2025-03-02", Decimal("1")),
    ]
    manifest = json.loads((lake / MANIFEST_NAME).read_text())
    first_id = lake_rows(lake)[0][0]  # PostgreSQL's sequence runs on across tests
    assert manifest["rows"] == 3 and manifest["exported_ids"] == [[first_id, first_id + 2]]


def test_a_row_committed_late_below_the_exported_ids_is_exported_once(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Ids 1..3 exist, id 2 is removed (as if not yet committed), then arrives late."""
    lake = tmp_path / "lake"
    insert_rows(sqlite_url, [served(m, "A", **S) for m in (0, 1, 2)])
    engine = make_engine(sqlite_url)
    with engine.begin() as conn:
        late = conn.execute(token_usage.select().where(token_usage.c.id == 2)).mappings().one()
        conn.execute(delete(token_usage).where(token_usage.c.id == 2))
    with Analytics(sqlite_url, path=tmp_path / "copy.duckdb") as analytics:
        assert export_lake(analytics, lake).new_rows == 2
    assert json.loads((lake / MANIFEST_NAME).read_text())["exported_ids"] == [[1, 1], [3, 3]]
    with engine.begin() as conn:
        conn.execute(token_usage.insert().values(**late))
    engine.dispose()
    with Analytics(sqlite_url, path=tmp_path / "copy.duckdb") as analytics:
        result = export_lake(analytics, lake)
    assert (result.new_rows, result.total_rows) == (1, 3)
    assert [i for i, _, _ in lake_rows(lake)] == [1, 2, 3]


def test_another_ledger_is_refused_not_skipped(sqlite_url: str, tmp_path: Path) -> None:
    """A second ledger's ids 1..n look exported already: its rows must not be skipped."""
    lake = tmp_path / "lake"
    insert_rows(sqlite_url, [served(m, "A", **S) for m in (0, 1, 2)])
    with Analytics(sqlite_url, path=tmp_path / "copy.duckdb") as analytics:
        export_lake(analytics, lake)
    manifest_before = (lake / MANIFEST_NAME).read_text()
    other = migrated_sqlite(tmp_path / "other.db")
    insert_rows(other, [served(m, "B", **S) for m in (0, 1, 2, 3)])  # ids 1..3 and one more
    smaller = migrated_sqlite(tmp_path / "smaller.db")
    insert_rows(smaller, [served(0, "B", **S)])  # id 1 only: none of the lake's anchors
    refusals = ((other, "row 3 is event"), (smaller, "but none of its newest rows"))
    for n, (url, why) in enumerate(refusals):
        with (
            Analytics(url, path=tmp_path / f"copy{n}.duckdb") as analytics,
            pytest.raises(LakeTargetError, match="another ledger's rows") as refused,
        ):
            export_lake(analytics, lake)
        assert why in str(refused.value) and "a target of its own" in str(refused.value)
    assert (lake / MANIFEST_NAME).read_text() == manifest_before
    assert [i for i, _, _ in lake_rows(lake)] == [1, 2, 3]


def test_the_same_ledger_exports_after_old_rows_are_deleted_and_from_an_old_manifest(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Retention removes the oldest rows: the newest files' anchors still match. A manifest
    written before anchors existed is checked against its files' data."""
    lake = tmp_path / "lake"
    insert_rows(sqlite_url, [served(m, "A", **S) for m in (0, 1500, 3000)])  # three days
    with Analytics(sqlite_url, path=tmp_path / "copy.duckdb") as analytics:
        export_lake(analytics, lake)
    manifest = json.loads((lake / MANIFEST_NAME).read_text())
    assert [f["anchor"] for f in manifest["files"]] == [lake_events(lake)[i] for i in (1, 2, 3)]
    for entry in manifest["files"]:
        del entry["anchor"]
    (lake / MANIFEST_NAME).write_text(json.dumps(manifest))
    engine = make_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(delete(token_usage).where(token_usage.c.id <= 2))
    engine.dispose()
    insert_rows(sqlite_url, [served(3001, "A", **S)])
    with Analytics(sqlite_url, path=tmp_path / "copy.duckdb") as analytics:
        assert export_lake(analytics, lake).new_rows == 1
    assert [i for i, _, _ in lake_rows(lake)] == [1, 2, 3, 4]


def lake_events(lake: Path) -> dict[int, str]:
    with duckdb.connect() as con:
        rows = con.execute(f"SELECT id, event_id FROM read_parquet('{lake}/*/*.parquet')")
        return dict(rows.fetchall())


def test_files_follow_the_documented_schema(sqlite_url: str, tmp_path: Path) -> None:
    insert_rows(sqlite_url, [served(0, "A", tags={"team": "x"}, **S)])
    with Analytics(sqlite_url, path=tmp_path / "copy.duckdb") as analytics:
        export_lake(analytics, tmp_path / "lake")
    (path,) = (tmp_path / "lake").glob("*/*.parquet")
    schema = pq.read_schema(path)
    assert schema.equals(lake_schema(), check_metadata=False)
    assert str(schema.field("started_at").type) == "timestamp[us, tz=UTC]"
    assert str(schema.field("cost_usd").type) == "decimal128(20, 10)"
    assert json.loads(pq.read_table(path).column("tags")[0].as_py()) == {"team": "x"}


def test_duckdb_reads_the_views_from_the_lake(sqlite_url: str, tmp_path: Path) -> None:
    insert_rows(sqlite_url, [served(0, "A", cost_usd=Decimal("0.5"), **S), served(1, "A", **S)])
    with Analytics(sqlite_url, path=tmp_path / "copy.duckdb") as analytics:
        export_lake(analytics, tmp_path / "lake")
        expected = analytics.sql("SELECT * FROM session_stickiness")
    con = duck.connect(tmp_path / "lake")
    got = con.execute("SELECT * FROM session_stickiness").df()
    assert got.to_dict("records") == expected.to_dict("records")
    assert con.execute("SELECT sum(cost_usd) FROM calls").fetchone() == (Decimal("0.5"),)


@pytest.mark.parametrize("where", ["missing", "empty directory", "file"])
def test_a_path_no_export_wrote_is_an_error_not_a_lake_of_no_rows(
    tmp_path: Path, where: str
) -> None:
    target = tmp_path / "lake"
    if where == "empty directory":
        target.mkdir()
    elif where == "file":
        target.write_text("not a lake")
    expected = LakeTargetError if where == "file" else LakeEmpty
    with pytest.raises(expected, match="ledger export") as info:
        duck.connect(target)
    assert info.value.target == str(target)


_KILLED_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from ledger.analytics import Analytics
    import ledger.lake.export as export

    class Dying:
        \"\"\"The real local filesystem, killed by SIGKILL at one step of the first day.\"\"\"

        def __init__(self, real):
            self.real = real

        def __getattr__(self, name):
            return getattr(self.real, name)

        def move(self, src, dest):
            if sys.argv[3] == "before-move" and "date=" in src:
                os.kill(os.getpid(), signal.SIGKILL)  # the day's file written, not moved
            self.real.move(src, dest)
            if sys.argv[3] == "before-commit" and dest.endswith(".parquet"):
                os.kill(os.getpid(), signal.SIGKILL)  # moved into place, not committed

    real_open = export.open_target
    export.open_target = lambda target: (Dying(real_open(target)[0]), real_open(target)[1])
    from pathlib import Path
    with Analytics(sys.argv[1], path=Path(sys.argv[2] + ".duckdb")) as analytics:
        export.export_lake(analytics, sys.argv[2])
    """
)


@pytest.mark.parametrize("when", ["before-move", "before-commit"])
def test_an_export_killed_mid_run_leaves_no_partial_file_and_the_next_run_completes(
    sqlite_url: str, tmp_path: Path, when: str
) -> None:
    insert_rows(sqlite_url, [served(m, "A", **S) for m in (0, 1, 1500)])  # two days
    lake = tmp_path / "lake"
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_CHILD, sqlite_url, str(lake), when],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert not (lake / MANIFEST_NAME).exists()  # the first day's file was never committed
    for path in visible_files(lake):  # any file a glob sees is whole
        assert pq.read_metadata(lake / path).num_rows > 0
    with Analytics(sqlite_url, path=tmp_path / "copy.duckdb") as analytics:
        result = export_lake(analytics, lake)
    assert result.new_rows == 3 and result.total_rows == 3
    assert result.removed_uncommitted == 1
    assert [i for i, _, _ in lake_rows(lake)] == [1, 2, 3]
    assert not list(lake.rglob("*.tmp"))


def test_the_export_command_says_what_it_added(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    insert_rows(sqlite_url, [served(0, "A", **S), served(1500, "A", **S)])
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "copy.duckdb"))
    out = tmp_path / "lake"
    first = CliRunner().invoke(cli, ["export", str(out)])
    assert first.exit_code == 0, first.output
    assert "2 new rows in 2 files" in first.output and "the lake holds 2 rows" in first.output
    second = CliRunner().invoke(cli, ["export", str(out)])
    assert "nothing new" in second.output and "the lake holds 2 rows" in second.output


def test_merge_ranges_joins_adjacent_and_overlapping_ranges() -> None:
    assert merge_ranges([(5, 6), (1, 2), (3, 3), (9, 12), (10, 11)]) == ((1, 3), (5, 6), (9, 12))
    assert Manifest(exported=((3, 4), (8, 9))).holes() == [(1, 2), (5, 7)]
