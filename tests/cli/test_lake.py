"""``ledger lake derive``: what it says, what it writes, and the one check on its target."""

from __future__ import annotations

import json
from pathlib import Path

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
    assert "4 rows derived from the whole lake; the state reflects 4 rows" in first.out
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
    assert "1 row folded in; the state reflects 25 rows" in outcome.out


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_derive_over_no_exported_rows_names_the_fix_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    target = tmp_path / "lake"
    if kind == "empty":
        target.mkdir()
    outcome = ledger(capsys, "lake", "derive", str(target))
    assert outcome.code == 2
    assert outcome.err == (
        f"ledger: {target} holds no exported rows (no _ledger_manifest.json, or an empty one): "
        f"run `ledger export {target}` first\n"
    )
    assert outcome.out == ""
    assert (target.exists()) == (kind == "empty")  # nothing created
