"""What read commands leave in a SQLite ledger's directory: nothing, even one they may not write.

A WAL database gets ``-wal`` and ``-shm`` files beside it while it is open; the
last connection to close deletes them, but only if it may write. A read
command used to open the ledger read-only and so left both behind, and in a
directory its user may not write (a shared, read-only copy) it could not open
the ledger at all, nor put its analytics copy beside it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest

from tests.analytics.builders import insert_rows, served
from tests.cli.shell import ledger

ROWS = [served(i, "A", cost_usd=Decimal("0.25"), session_id="s", session_key="k") for i in range(3)]
READS = [["report"], ["sql", "SELECT count(*) AS n FROM token_usage"], ["budget", "status"]]


def test_read_commands_leave_no_wal_files(
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    insert_rows(sqlite_url, ROWS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    monkeypatch.delenv("LEDGER_ANALYTICS_PATH", raising=False)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.ledger.budgets.daily]\nkind = "agent_day"\nlimit_usd = 5\n'
    )
    for args in READS:
        result = ledger(capsys, *args)
        assert result.code == 0, (args, result.err)
        left = sorted(p.name for p in tmp_path.glob("ledger.db-*"))
        assert left == [], (args, left)


@pytest.fixture
def shared_copy(sqlite_url: str, tmp_path: Path) -> Iterator[Path]:
    """A ledger in a directory only its owner (root) may write, readable by all."""
    insert_rows(sqlite_url, ROWS)
    shared = Path(tempfile.mkdtemp(prefix="ledger-shared-"))
    shutil.copy(tmp_path / "ledger.db", shared / "ledger.db")
    (shared / "ledger.db").chmod(0o644)
    shared.chmod(0o555)
    try:
        yield shared
    finally:
        shared.chmod(0o755)
        shutil.rmtree(shared)


def _as_nobody() -> list[str]:
    """The command prefix that runs as ``nobody``, or a skip: only root can drop to it."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run a command as a user who may not write")
    return [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def test_a_ledger_in_a_directory_the_reader_may_not_write(shared_copy: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="ledger-nobody-"))
    home.chmod(0o777)
    before = sorted(p.name for p in shared_copy.iterdir())
    try:
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "LEDGER_DATABASE_URL": f"sqlite:///{shared_copy / 'ledger.db'}",
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        }
        code = "from ledger.cli import main; main()"
        for args in (["report"], ["sql", "SELECT count(*) AS n FROM token_usage"]):
            done = subprocess.run(
                [*_as_nobody(), sys.executable, "-c", code, *args],
                cwd=home,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, done.stderr
            assert "Traceback" not in done.stderr
        assert "3" in done.stdout  # the sql count
        assert sorted(p.name for p in shared_copy.iterdir()) == before
        # the analytics copy went to the reader's cache directory instead
        assert list((home / ".cache" / "ledger").glob("analytics-*.duckdb"))
    finally:
        shutil.rmtree(home, ignore_errors=True)
