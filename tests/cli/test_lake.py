"""``ledger lake derive``: what it says, what it writes, and the one check on its target."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow.dataset as pads
import pytest

from ledger.lake import duck
from ledger.lake.derive import STATE_DIR, STATE_MANIFEST
from tests.analytics.builders import insert_rows, served
from tests.cli.shell import ledger

S = {"session_id": "s", "actor_id": "planner", "session_key": "k"}


@pytest.fixture
def lake(
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Path:
    """A lake of four rows from `ledger export`."""
    insert_rows(sqlite_url, [served(m, "A" if m < 2 else "B", **S) for m in range(4)])
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "analytics.duckdb"))
    out = tmp_path / "lake"
    assert ledger(capsys, "export", str(out)).code == 0
    return out


def test_derive_writes_the_state_and_then_has_nothing_new(
    lake: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = ledger(capsys, "lake", "derive", str(lake))
    assert first.code == 0, first.err
    assert "4 new rows, the whole lake folded; the state reflects 4 rows" in first.out
    manifest = json.loads((lake / STATE_DIR / STATE_MANIFEST).read_text())
    assert (manifest["rows"], manifest["max_id"], manifest["generation"]) == (4, 4, 1)
    con = duck.connect(lake)  # over the state: no warning (tests turn warnings into errors)
    assert con.execute("SELECT switches FROM session_stickiness").fetchall() == [(1,)]
    again = ledger(capsys, "lake", "derive", str(lake))
    assert again.code == 0 and "nothing new: the state reflects all 4 rows" in again.out


def test_derive_folds_only_the_rows_a_new_export_added(
    lake: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    insert_rows(sqlite_url, [served(m, "B", **S) for m in range(4, 24)])
    assert ledger(capsys, "export", str(lake)).code == 0
    ledger(capsys, "lake", "derive", str(lake))
    insert_rows(sqlite_url, [served(24, "A", **S)])
    assert ledger(capsys, "export", str(lake)).code == 0
    outcome = ledger(capsys, "lake", "derive", str(lake))
    assert outcome.code == 0, outcome.err
    assert "1 new row folded in; the state reflects 25 rows" in outcome.out


def test_a_quarter_of_the_lake_new_or_more_is_folded_whole_and_says_so(
    lake: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ledger(capsys, "lake", "derive", str(lake))
    insert_rows(sqlite_url, [served(m, "B", **S) for m in range(4, 8)])
    assert ledger(capsys, "export", str(lake)).code == 0
    outcome = ledger(capsys, "lake", "derive", str(lake))
    assert outcome.code == 0, outcome.err
    assert "4 new rows, the whole lake folded again; the state reflects 8 rows" in outcome.out


def test_with_its_state_the_lake_still_reads_as_one_table_of_rows(
    lake: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ledger(capsys, "lake", "derive", str(lake)).code == 0
    # what `ledger export --help` promises: readers of a Hive-partitioned directory
    # see the exported rows and nothing of the state (kept under _state/)
    rows = pads.dataset(lake, format="parquet", partitioning="hive")
    assert rows.count_rows() == 4
    glob = f"SELECT count(*) FROM read_parquet('{lake}/*/*.parquet', hive_partitioning = true)"
    assert duckdb.sql(glob).fetchall() == [(4,)]


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_derive_over_no_exported_rows_names_the_fix_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    target = tmp_path / "lake"
    if kind == "empty":
        target.mkdir()
    outcome = ledger(capsys, "lake", "derive", str(target))
    assert outcome.code == 2
    what = (
        "holds no exported rows (no _ledger_manifest.json, or an empty one)"
        if kind == "empty"
        else "does not exist"
    )
    assert outcome.err == (
        f"ledger: {target} {what}: run `ledger export {target}` first, or give the "
        "directory it wrote\n"
    )
    assert outcome.out == ""
    assert (target.exists()) == (kind == "empty")  # nothing created


@pytest.mark.parametrize("command", [["export"], ["lake", "derive"]])
def test_a_file_as_the_lake_is_one_line_and_exit_2_and_the_file_is_untouched(
    tmp_path: Path,
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    insert_rows(sqlite_url, [served(0, "A", **S)])
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "analytics.duckdb"))
    target = tmp_path / "notes.txt"
    target.write_text("not a lake")
    outcome = ledger(capsys, *command, str(target))
    assert outcome.code == 2
    assert outcome.err == (
        f"ledger: {target} is a file; a lake is a directory (or an object-store prefix) "
        "that `ledger export` writes\n"
    )
    assert target.read_text() == "not a lake"
