"""Bidi formatting from the ledger is shown escaped wherever the CLI shows ledger strings.

An upstream named ``\\u202eAmazon Bedrock`` (U+202E RIGHT-TO-LEFT OVERRIDE) reads
"kcordeB nozamA" on a terminal, and an override or isolate left open reorders the
rest of the line. ``ledger report`` and ``ledger sql`` tables show such characters
as ``\\u202e``, as they show an ESC as ``\\x1b``; JSON carries them as JSON's own
``\\u202e`` escapes (the same strings to a parser); CSV is the data as stored in a
pipe and escaped on a terminal; an error quoting a ledger value is escaped too.
Each command runs in a real process, on a pipe or on a pseudo-terminal.
"""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import subprocess
import sys
import tty
from decimal import Decimal
from pathlib import Path

import pytest

from tests.analytics.builders import insert_rows, served
from tests.cli.shell import ledger_cli

#: Every bidi formatting character: ALM, LRM, RLM, LRE, RLE, PDF, LRO, RLO, LRI, RLI, FSI, PDI.
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
UPSTREAM = "\u202eAmazon Bedrock"
AGENT = f"planner{BIDI}"
#: OSC (window title), BEL and CR: a cell CSV quotes.
CONTROLS = "Together\x1b]0;pwned\x07\rX"
RAW = set(BIDI) | {"\x1b", "\x07", "\r", "\x9b"}


def raw_in(text: str) -> set[str]:
    return {c for c in text if c in RAW}


@pytest.fixture
def env(sqlite_url: str, tmp_path: Path) -> dict[str, str]:
    rows = [
        served(i, UPSTREAM, session_id="s1", actor_id=AGENT, cost_usd=Decimal("0.01"))
        for i in range(4)
    ]
    rows += [served(4 + i, CONTROLS, session_id="s2", actor_id="coder") for i in range(2)]
    insert_rows(sqlite_url, rows)
    return {
        **os.environ,
        "LEDGER_DATABASE_URL": sqlite_url,
        "LEDGER_ANALYTICS_PATH": str(tmp_path / "analytics.duckdb"),
    }


def on_a_terminal(*args: str, env: dict[str, str]) -> str:
    """``ledger ARGS`` with stdout on a pseudo-terminal (raw mode: bytes as written)."""
    controller, terminal = pty.openpty()
    tty.setraw(terminal)  # no CR added to line feeds: the output as the program wrote it
    proc = subprocess.Popen(
        [sys.executable, "-c", "from ledger.cli import main; main()", *args],
        env=env,
        stdout=terminal,
        stderr=subprocess.PIPE,
    )
    os.close(terminal)
    chunks = []
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the process closed its side
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    return b"".join(chunks).decode("utf-8")


@pytest.mark.parametrize("width", [80, 120])
def test_report_shows_a_right_to_left_override_escaped_not_reversed(
    env: dict[str, str], width: int
) -> None:
    result = ledger_cli("report", env={**env, "COLUMNS": str(width)})
    assert result.returncode == 0, result.stderr
    assert raw_in(result.stdout) == set()
    assert "\\u202eAmazon Bedrock" in result.stdout
    assert "planner\\u061c\\u200e\\u200f\\u202a" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= width


def test_sql_table_shows_bidi_characters_escaped(env: dict[str, str]) -> None:
    query = "SELECT DISTINCT actor_id, upstream FROM token_usage ORDER BY 1 DESC"
    result = ledger_cli("sql", query, env={**env, "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    assert raw_in(result.stdout) == set()
    assert "\\u202eAmazon Bedrock" in result.stdout
    shown_agent = "planner" + "".join(f"\\u{ord(c):04x}" for c in BIDI)
    assert shown_agent in result.stdout


def test_sql_json_carries_bidi_and_c1_as_escapes_and_parses_to_the_data(
    env: dict[str, str],
) -> None:
    query = "SELECT DISTINCT actor_id, upstream, 'csi' || chr(155) AS c1 FROM token_usage"
    result = ledger_cli("sql", query, "--format", "json", env=env)
    assert result.returncode == 0, result.stderr
    assert raw_in(result.stdout) == set()
    assert "\\u202eAmazon Bedrock" in result.stdout and "csi\\u009b" in result.stdout
    rows = json.loads(result.stdout)
    assert {(r["actor_id"], r["upstream"]) for r in rows} == {
        (AGENT, UPSTREAM),
        ("coder", CONTROLS),
    }
    assert "café ✓" in ledger_cli("sql", "SELECT 'café ✓' AS t", "--format", "json", env=env).stdout


def test_sql_csv_is_the_data_in_a_pipe_and_escaped_on_a_terminal(env: dict[str, str]) -> None:
    # the header (a column alias), a quoted cell (CR) and a bidi override, all from the query
    query = (
        'SELECT upstream AS "up\x1b[2J\u202e", actor_id FROM token_usage '
        "WHERE actor_id = 'coder' LIMIT 1"
    )
    piped = subprocess.run(
        [sys.executable, "-c", "from ledger.cli import main; main()", "sql", query, "--format",
         "csv"], env=env, capture_output=True, timeout=180, check=True,
    )  # fmt: skip
    text = piped.stdout.decode("utf-8")  # bytes: text mode would turn the CR into a newline
    assert list(csv.reader(io.StringIO(text, newline=""))) == [
        ["up\x1b[2J\u202e", "actor_id"],
        [CONTROLS, "coder"],
    ]
    shown = on_a_terminal("sql", query, "--format", "csv", env=env)
    assert raw_in(shown) == set()
    assert shown.splitlines() == [
        "up\\x1b[2J\\u202e,actor_id",
        '"Together\\x1b]0;pwned\\x07\\x0dX",coder',
    ]


def test_a_query_error_quoting_a_ledger_value_is_escaped(env: dict[str, str]) -> None:
    # DuckDB's conversion error quotes the value it could not convert
    for where in ("actor_id = 'coder'", "actor_id <> 'coder'"):
        query = f"SELECT CAST(upstream AS INTEGER) FROM token_usage WHERE {where}"
        for fmt in ("table", "csv", "json"):
            result = ledger_cli("sql", query, "--format", fmt, env=env)
            assert result.returncode == 1 and "Could not convert" in result.stderr
            assert raw_in(result.stderr) == set(), result.stderr
    assert "\\u202eAmazon Bedrock" in result.stderr
