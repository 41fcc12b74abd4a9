"""``ledger report`` and ``ledger sql`` in a real process at 80 and 120 columns; the sync
progress bar: drawn for a person at a terminal, never into data output.

The ledger holds the dashboard tests' multi-agent workload plus calls whose
model and agent carry rich markup, Markdown and terminal ESC sequences (a
window-title OSC and a clear-screen CSI).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import io
import os
import pty
import struct
import sys
import termios
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from rich.console import Console

from ledger.analytics import Analytics
from ledger.cli import report
from ledger.cli.tables import VERDICT_WORDS, safe
from ledger.events import UsageEvent
from ledger.store.ledger import Ledger
from tests.analytics.builders import insert_rows, open_analytics
from tests.analytics.test_cache_economics import chatty_agent, hourly_agent
from tests.analytics.test_verdict import scenario_ledger
from tests.cli.shell import ledger_cli
from tests.dashboards.workload import record_workload

NASTY_MODEL = "[bold red]x[/] [l](http://evil.invalid) \x1b]0;pwned\x07\x1b[2J"
NASTY_AGENT = "agent\x1b[31m"


@pytest.fixture
def env(sqlite_url: str, tmp_path: Path) -> dict[str, str]:
    record_workload(sqlite_url, tmp_path)
    with Ledger(sqlite_url, journal_dir=tmp_path / "journal-nasty") as ledger:
        for n in range(3):
            ledger.record(
                UsageEvent(
                    started_at=dt.datetime(2025, 6, 2, 10, n, tzinfo=dt.UTC),
                    requested_provider="openrouter",
                    requested_model=NASTY_MODEL,
                    provider="openrouter",
                    upstream="Together",
                    status="ok",
                    session_id="s-nasty",
                    actor_id=NASTY_AGENT,
                    input_tokens=1_000,
                    output_tokens=10,
                    cost_usd=Decimal("0.01"),
                    cost_source="provider",
                )
            )
        assert ledger.flush(30)
    return {
        **os.environ,
        "LEDGER_DATABASE_URL": sqlite_url,
        "LEDGER_ANALYTICS_PATH": str(tmp_path / "analytics.duckdb"),
    }


def test_a_warranted_verdict_says_what_to_paste_under_its_line(
    sqlite_url: str, tmp_path: Path
) -> None:
    insert_rows(sqlite_url, scenario_ledger())  # tests/analytics/test_verdict.py's cases
    open_analytics(sqlite_url, tmp_path, min_samples=50).close()  # its settings stay in the file
    env = {
        **os.environ,
        "LEDGER_DATABASE_URL": sqlite_url,
        "LEDGER_ANALYTICS_PATH": str(tmp_path / "analytics.duckdb"),
        "COLUMNS": "200",
    }
    lines = [line.rstrip() for line in ledger_cli("report", env=env).stdout.splitlines()]
    at = next(i for i, line in enumerate(lines) if line.startswith("  • minority:"))
    assert lines[at].startswith("  • minority: warranted — Ignore Amazon Bedrock")
    assert lines[at + 1] == '    paste: "provider": {"ignore":["amazon-bedrock"]}'


@pytest.mark.parametrize("width", [80, 120])
def test_the_cache_lifetime_advice_says_what_to_paste(
    sqlite_url: str, tmp_path: Path, width: int
) -> None:
    insert_rows(sqlite_url, [*hourly_agent(), *chatty_agent()])  # test_cache_economics' agents
    open_analytics(sqlite_url, tmp_path, min_samples=20).close()
    env = {
        **os.environ,
        "LEDGER_DATABASE_URL": sqlite_url,
        "LEDGER_ANALYTICS_PATH": str(tmp_path / "analytics.duckdb"),
        "COLUMNS": str(width),
    }
    result = ledger_cli("report", env=env)
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= width
    flowing = " ".join(result.stdout.split())
    assert "Prompt-cache economics" in flowing
    assert "• hourly · claude-sonnet-4-5-20250929 (anthropic): switch — switch to 1h" in flowing
    assert 'paste: cache_control: {"type": "ephemeral", "ttl": "1h"} on the last' in flowing
    assert "• chatty · claude-sonnet-4-5-20250929 (anthropic): keep — keep 5m" in flowing


def expected_verdicts(env: dict[str, str], tmp_path: Path) -> list[tuple[str, str]]:
    with Analytics(env["LEDGER_DATABASE_URL"], path=tmp_path / "expected.duckdb") as a:
        verdicts = a.provider_order_verdict()
    return [
        (safe(m), VERDICT_WORDS[str(v)])
        for m, v in zip(verdicts["requested_model"], verdicts["verdict"], strict=True)
    ]


@pytest.mark.parametrize("width", [80, 120])
def test_report_fits_the_terminal_and_states_every_verdict(
    env: dict[str, str], tmp_path: Path, width: int
) -> None:
    result = ledger_cli("report", env={**env, "COLUMNS": str(width)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= width
    assert "\x1b" not in result.stdout, "a control character reached the terminal raw"
    assert lines[0].startswith("ledger ") and "rows" in result.stdout.split("\n\n")[0]
    verdicts = expected_verdicts(env, tmp_path)
    assert len(verdicts) >= 3
    at = lines.index("provider.order verdicts:") + 1
    block = lines[at : lines.index("", at)]
    assert all(line.startswith("  ") for line in block), block  # a wrapped line stays indented
    flowing = " ".join(result.stdout.split())  # rich wraps long lines at spaces
    for model, words in verdicts:
        assert any(line.startswith(f"  • {model}:") for line in lines), model  # the name whole
        assert " ".join(f"• {model}: {words}".split()) in flowing, (model, words)
    assert "not_warranted" not in result.stdout and "insufficient_data" not in result.stdout
    for title in ("Sticky routing per agent", "Prompt-cache hits per agent",
                  "Cost by responding provider", "provider.order verdicts"):  # fmt: skip
        assert title in result.stdout
    # every agent name appears whole on some line (as a column cell or a group heading)
    for agent in ("planner", "coder", "reviewer", "support", safe(NASTY_AGENT)):
        assert any(agent in line for line in lines), agent


def test_report_is_the_same_twice(env: dict[str, str]) -> None:
    first = ledger_cli("report", env={**env, "COLUMNS": "100"})
    second = ledger_cli("report", env={**env, "COLUMNS": "100"})
    assert first.returncode == second.returncode == 0
    assert first.stdout == second.stdout


def test_a_busy_analytics_file_is_a_warning_on_stderr_not_in_the_report(
    env: dict[str, str],
) -> None:
    ledger_cli("report", env=env)  # creates the analytics file
    holder = duckdb.connect(env["LEDGER_ANALYTICS_PATH"])  # another process's lock, as it were
    try:
        result = ledger_cli("report", env={**env, "COLUMNS": "120"})
    finally:
        holder.close()
    assert result.returncode == 0, result.stderr
    assert "in use by another process" in result.stderr
    assert "in use" not in result.stdout and "WARNING" not in result.stdout
    assert result.stdout.startswith("ledger ")


def test_sql_table_never_cuts_a_value(env: dict[str, str]) -> None:
    query = (
        "SELECT requested_model, actor_id, 1274 AS calls, 'a fairly long label to widen it' AS "
        "note, 123456789 AS tokens, 0.5 AS share FROM calls LIMIT 3"
    )
    narrow = ledger_cli("sql", query, env={**env, "COLUMNS": "80"})
    assert narrow.returncode == 0, narrow.stderr
    assert "one record per block" in narrow.stdout
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80
    assert narrow.stdout.count("1,274") == 3 and narrow.stdout.count("123,456,789") == 3
    wide = ledger_cli("sql", query, env={**env, "COLUMNS": "200"})
    assert "one record per block" not in wide.stdout
    assert wide.stdout.count("1,274") == 3


def test_sql_escapes_control_characters(env: dict[str, str]) -> None:
    query = "SELECT DISTINCT requested_model, actor_id FROM calls WHERE session_id = 's-nasty'"
    result = ledger_cli("sql", query, env={**env, "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout
    assert safe(NASTY_AGENT) in result.stdout
    assert "[bold red]x[/]" in result.stdout  # rich markup shown, not applied


@pytest.fixture
def no_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bar's delay is what made its appearance depend on the machine's load:
    # without it, every run takes the path a slow sync takes.
    monkeypatch.setattr(report, "PROGRESS_DELAY_S", 0.0)


@pytest.mark.usefixtures("no_delay")
def test_the_bar_is_drawn_on_a_terminal() -> None:
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=80)
    with report.progress_bar("syncing the ledger", console) as update:
        update(1, 4)
        update(4, 4)
    assert "syncing the ledger" in screen.getvalue()


@pytest.mark.usefixtures("no_delay")
def test_nothing_is_drawn_into_a_pipe_or_a_file() -> None:
    piped = io.StringIO()
    console = Console(file=piped, force_terminal=False, width=80)
    with report.progress_bar("syncing the ledger", console) as update:
        update(1, 4)
        update(4, 4)
    assert piped.getvalue() == ""


def test_piped_into_a_pager_the_report_takes_the_terminals_width(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `ledger report | less` in a 93-column terminal: stdout is a pipe, stderr the terminal
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 93, 0, 0))
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    with open(terminal, "w", closefd=True) as tty:
        monkeypatch.setattr(sys, "stderr", tty)
        assert report.terminal().width == 93
        monkeypatch.setattr(sys, "stderr", io.StringIO())  # no terminal at all: cron, CI
        assert report.terminal().width == 160
    os.close(controller)
