"""``ledger db status``: the answer in its exit status, and nothing created to give it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ledger.store.migrate import head_revision
from tests.cli.shell import ledger


def test_status_of_a_migrated_ledger_exits_0(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LEDGER_DATABASE_URL", ledger_url)
    result = ledger(capsys, "db", "status")
    assert result.code == 0, result.err
    assert f"revision {head_revision()} (code: {head_revision()}), up to date" in result.out


def test_status_of_a_missing_ledger_exits_1_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LEDGER_DATABASE_URL", raising=False)
    result = ledger(capsys, "db", "status")
    assert result.code == 1
    assert "no ledger database" in result.out and "ledger db upgrade" in result.out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("revision", [None, "0000_older"])
def test_status_of_an_out_of_date_ledger_exits_1(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    revision: str | None,
) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as con:
        if revision is not None:
            con.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
            con.execute("INSERT INTO alembic_version VALUES (?)", (revision,))
    monkeypatch.setenv("LEDGER_DATABASE_URL", f"sqlite:///{path}")
    result = ledger(capsys, "db", "status")
    assert result.code == 1
    assert f"revision {revision or 'none'} (code: {head_revision()}), out of date" in result.out


def test_status_of_an_unreachable_server_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # port 9 (discard) on loopback: nothing listens, the connection is refused at once
    monkeypatch.setenv("LEDGER_DATABASE_URL", "postgresql://ledger:secret@127.0.0.1:9/ledger")
    result = ledger(capsys, "db", "status")
    assert result.code == 2
    assert "127.0.0.1:9" in result.err and "secret" not in result.err
