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


def test_the_summary_prints_names_from_the_ledger_as_data(ledger_url: str, tmp_path: Path) -> None:
    """An agent named with Rich markup once crashed the summary after the whole run
    (MarkupError) and lost the brackets of another; a control character reached the
    terminal raw."""
    import io

    from rich.console import Console
    from sqlalchemy.engine import make_url

    from ledger.cli.demo import print_summary
    from ledger.demo.runner import DemoStats
    from tests.analytics.builders import insert_rows, open_analytics, row

    url = ledger_url
    names = ["ops[/red]bot", "[link](http://x)_[b]x[/b]", "esc\x1b[31mred"]
    insert_rows(url, [row(i, actor_id=name, session_id=f"s{i}") for i, name in enumerate(names)])
    out = io.StringIO()
    with open_analytics(url, tmp_path) as analytics:
        print_summary(Console(file=out, width=200), DemoStats(), analytics, make_url(url))
    text = out.getvalue()
    assert "ops[/red]bot (m)" in text and "[link](http://x)_[b]x[/b] (m)" in text
    assert "esc\\x1b[31mred (m)" in text and "\x1b" not in text
