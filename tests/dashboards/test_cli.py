"""``ledger dashboard``: finds its app, refuses a ledger it cannot show, builds the command."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ledger.cli.dashboard import app_path, dashboard_env, streamlit_command
from ledger.store.engine import ENV_URL
from tests.dashboards.conftest import APP


def run_cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from ledger.cli import main; main()", *args],
        env={**dashboard_env(url)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_app_is_found_in_the_repository() -> None:
    assert app_path() == APP


def test_command_runs_streamlit_on_the_requested_address() -> None:
    command = streamlit_command(APP, port=8765, host="127.0.0.1", headless=True)
    assert command[:5] == [sys.executable, "-m", "streamlit", "run", str(APP)]
    pairs = dict(zip(command[5::2], command[6::2], strict=True))
    assert pairs["--server.port"] == "8765"
    assert pairs["--server.address"] == "127.0.0.1"
    assert pairs["--server.headless"] == "true"


def test_child_gets_the_resolved_ledger_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, "sqlite:///elsewhere.db")
    assert dashboard_env("sqlite:////abs/ledger.db")[ENV_URL] == "sqlite:////abs/ledger.db"


def test_missing_ledger_names_the_commands_that_create_it(tmp_path: Path) -> None:
    path = tmp_path / "none.db"
    result = run_cli("dashboard", "--headless", url=f"sqlite:///{path}")
    assert result.returncode != 0
    assert "ledger db upgrade" in result.stderr and "ledger demo" in result.stderr
    assert not path.exists()


def test_unmigrated_ledger_says_ledger_db_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "bare.db"
    sqlite3.connect(path).close()
    result = run_cli("dashboard", "--headless", url=f"sqlite:///{path}")
    assert result.returncode == 2
    assert "ledger db upgrade" in result.stderr
    assert "Traceback" not in result.stderr
