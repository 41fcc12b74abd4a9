"""``ledger demo``: next steps that work as typed, a warning when it appends, ``--fresh``."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.cli.test_report import ledger_cli

CALLS = "20"


def test_demo_prints_runnable_next_steps_and_says_when_it_appends(tmp_path: Path) -> None:
    # The venv is not active: its bin directory is not on PATH, as after `python3 dev.py demo`.
    env = {
        **{k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"},
        "PATH": "/usr/bin:/bin",
        "CI": "true",
        "LEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'ledger.db'}",
        "LEDGER_ANALYTICS_PATH": str(tmp_path / "analytics.duckdb"),
        "COLUMNS": "80",
    }
    first = ledger_cli("demo", "--calls", CALLS, "--no-dashboard", env=env)
    assert first.returncode == 0, first.stderr
    assert "already held" not in first.stderr
    steps = first.stdout.split("Next steps", 1)[1].splitlines()[1:]
    report_line = next(line for line in steps if " report " in line)
    command = shlex.split(report_line, comments=True)
    assert command[-1] == "report" and Path(command[0]).name == "ledger"
    assert Path(os.path.abspath(command[0])).parent == Path(sys.executable).parent
    ran = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert ran.returncode == 0, ran.stderr  # works as typed, without activating the venv
    assert ran.stdout.startswith("ledger ")

    second = ledger_cli("demo", "--calls", CALLS, "--no-dashboard", env=env)
    assert second.returncode == 0, second.stderr
    assert "already held" in second.stderr and "demo --fresh" in second.stderr

    fresh = ledger_cli("demo", "--calls", CALLS, "--no-dashboard", "--fresh", env=env)
    assert fresh.returncode == 0, fresh.stderr
    assert "--fresh: deleted" in fresh.stderr and "already held" not in fresh.stderr
    flowing = " ".join(fresh.stdout.split())
    now = re.search(r"the ledger now: ([\d,]+) calls", flowing)
    assert now is not None and int(now.group(1)) == int(CALLS)  # the first two runs are gone
