"""Empty, missing, old or unreachable ledgers get a message and a fix, never a traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ledger.store.engine import ENV_URL
from tests.dashboards.conftest import APP


def run_app(monkeypatch: pytest.MonkeyPatch, url: str) -> AppTest:
    monkeypatch.setenv(ENV_URL, url)
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def codes(at: AppTest) -> list[str]:
    return [c.value for c in at.code]


def test_empty_ledger_says_how_to_fill_it(monkeypatch: pytest.MonkeyPatch, sqlite_url: str) -> None:
    at = run_app(monkeypatch, sqlite_url)
    assert at.title[0].value == "The ledger is empty"
    assert "ledger demo" in codes(at)
    assert not at.metric


def test_missing_sqlite_file_names_the_commands_and_is_not_created(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "nowhere.db"
    at = run_app(monkeypatch, f"sqlite:///{path}")
    assert at.title[0].value == "No ledger database yet"
    assert "ledger db upgrade" in at.warning[0].value
    assert "ledger demo" in codes(at)
    assert not path.exists()


def test_unmigrated_database_says_ledger_db_upgrade(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "bare.db"
    sqlite3.connect(path).close()
    at = run_app(monkeypatch, f"sqlite:///{path}")
    assert at.title[0].value == "The ledger database is out of date"
    assert "ledger db upgrade" in codes(at)


def test_schema_at_another_revision_names_both_revisions(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
        con.execute("INSERT INTO alembic_version VALUES ('0000_older')")
    at = run_app(monkeypatch, f"sqlite:///{path}")
    assert "0000_older" in at.warning[0].value
    assert "ledger db upgrade" in codes(at)


def test_unreachable_postgresql_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # port 9 (discard) on loopback: nothing listens, the connection is refused at once
    at = run_app(monkeypatch, "postgresql://ledger:secret@127.0.0.1:9/ledger")
    assert at.title[0].value == "Cannot reach the ledger database"
    assert "127.0.0.1:9" in at.error[0].value
    assert "secret" not in at.error[0].value


def test_postgresql_ledger_renders_the_overview(
    monkeypatch: pytest.MonkeyPatch, pg_url: str, tmp_path: Path
) -> None:
    from tests.dashboards.workload import record_workload

    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "pg.duckdb"))
    rows = record_workload(pg_url, tmp_path)
    at = run_app(monkeypatch, pg_url)
    assert not at.error
    assert f"{rows:,} rows" in at.sidebar.caption[0].value
    assert {m.label for m in at.metric} >= {"Calls", "Spend", "Error rate"}
