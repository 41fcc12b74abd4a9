"""Every read command over an unfit ledger: one message naming the fix, exit 2, nothing created.

An unfit ledger is a missing SQLite file (in the working directory, or in a
directory that does not exist), an empty SQLite file, or a fresh PostgreSQL
database: none has the ledger schema.
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.cli.shell import Outcome, ledger

BUDGETS = """
[tool.ledger.budgets.ci_turn]
kind = "turn"
mean_usd = 0.02
"""

COMMANDS = [
    pytest.param(["report"], id="report"),
    pytest.param(["sql", "SELECT 1"], id="sql"),
    pytest.param(["export", "parquet"], id="export"),
    pytest.param(["budget", "check"], id="budget-check"),
    pytest.param(["budget", "status"], id="budget-status"),
    pytest.param(["otlp", "--port", "0"], id="otlp"),  # a server: refuses before it binds
]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with budgets and no ledger."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "pyproject.toml").write_text(BUDGETS)
    monkeypatch.chdir(work)
    for name in ("LEDGER_DATABASE_URL", "LEDGER_ANALYTICS_PATH", "LEDGER_BUDGETS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return work


@pytest.fixture
def fresh_pg_url(pg_server_url: str) -> Iterator[str]:
    """A PostgreSQL database nobody ran `ledger db upgrade` on."""
    url = make_url(pg_server_url)
    name = f"ledger_fresh_{uuid.uuid4().hex[:8]}"
    admin = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def files_under(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*")}


def assert_refused(result: Outcome, *, fix: str = "ledger db upgrade") -> None:
    assert result.code == 2, (result.out, result.err)
    assert fix in result.err, result.err
    assert "Traceback" not in result.err and "ProgrammingError" not in result.err
    assert "failed to allocate memory" not in result.err


@pytest.mark.parametrize("args", COMMANDS)
def test_a_missing_default_ledger_creates_nothing(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    before = files_under(tmp_path)
    result = ledger(capsys, *args)
    assert_refused(result)
    assert f"there is no ledger database at {project / 'ledger.db'}" in result.err
    assert files_under(tmp_path) == before  # no ledger.db, no analytics file, no cache


@pytest.mark.parametrize("args", COMMANDS)
def test_a_ledger_in_a_missing_directory_creates_no_directory(
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
) -> None:
    monkeypatch.setenv("LEDGER_DATABASE_URL", f"sqlite:///{tmp_path / 'nonexistent/dir/ledger.db'}")
    assert_refused(ledger(capsys, *args))
    assert not (tmp_path / "nonexistent").exists()


@pytest.mark.parametrize("args", COMMANDS)
def test_an_empty_sqlite_file_says_ledger_db_upgrade(
    project: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
) -> None:
    path = project / "ledger.db"
    sqlite3.connect(path).close()
    before = files_under(tmp_path)
    result = ledger(capsys, *args)
    assert_refused(result)
    assert "has no ledger schema yet" in result.err
    assert files_under(tmp_path) == before
    assert path.stat().st_size == 0


@pytest.mark.postgres
@pytest.mark.parametrize("args", COMMANDS)
def test_a_fresh_postgresql_database_says_ledger_db_upgrade(
    project: Path,
    fresh_pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
) -> None:
    monkeypatch.setenv("LEDGER_DATABASE_URL", fresh_pg_url)
    result = ledger(capsys, *args)
    assert_refused(result)
    assert "has no ledger schema yet" in result.err


def test_budget_check_json_reports_an_unfit_ledger_as_json(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = ledger(capsys, "budget", "check", "--format", "json")
    assert result.code == 2
    body = json.loads(result.out)
    assert body["ok"] is False and body["exceeded"] == []
    assert body["error"]["type"] == "LedgerMissing"
    assert "ledger db upgrade" in body["error"]["message"]


@pytest.mark.parametrize(
    ("args", "kind"),
    [
        pytest.param([], "BudgetConfigurationError", id="no-budgets-file"),
        pytest.param(["--since", "yesterday-ish"], "BadParameter", id="bad-since"),
        pytest.param(["--tag", "no-equals-sign"], "BadParameter", id="bad-tag"),
    ],
)
def test_budget_check_json_reports_configuration_errors_as_json(
    project: Path, capsys: pytest.CaptureFixture[str], args: list[str], kind: str
) -> None:
    if not args:
        os.remove(project / "pyproject.toml")
    result = ledger(capsys, "budget", "check", "--format", "json", *args)
    assert result.code == 2
    body = json.loads(result.out)
    assert body["ok"] is False and body["error"]["type"] == kind
    assert body["error"]["message"] and body["error"]["message"] in result.err
