"""Abuse: every class of escape a reviewer tries on ``ledger sql`` writes nothing.

Each door is tested on its own: DuckDB's parse refuses the statement (EXPLAIN's
wrapped statement included), and with that check taken away the engine still
cannot touch a file, an extension or the copy.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.analytics import Analytics
from tests.analytics.builders import insert_rows, served
from tests.cli.shell import ledger


@pytest.fixture
def place(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite ledger with four rows, its analytics file, and the query's working directory."""
    insert_rows(sqlite_url, [served(i, "A", session_id="s", actor_id="a") for i in range(4)])
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "analytics.duckdb"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def files(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its digest, the analytics file's own changes aside."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "analytics.duckdb" not in p.name
    }


def rows(capsys: pytest.CaptureFixture[str]) -> int:
    result = ledger(capsys, "sql", "SELECT count(*) AS n FROM token_usage", "--format", "json")
    assert result.code == 0, result.err
    n: int = json.loads(result.out)[0]["n"]
    return n


ESCAPES = [
    # EXPLAIN runs what it wraps
    "EXPLAIN ANALYZE COPY (SELECT 'gone' AS a) TO 'ledger.db' (HEADER false)",
    "EXPLAIN ANALYZE COPY (SELECT * FROM token_usage) TO 'rows.csv'",
    "EXPLAIN (FORMAT json) COPY (SELECT 1) TO 'rows.csv'",
    "EXPLAIN /* ANALYZE */ ANALYZE -- a comment\n INSTALL httpfs",
    "EXPLAIN ANALYZE LOAD httpfs",
    "EXPLAIN ANALYZE SET memory_limit = '1KB'",
    "EXPLAIN ANALYZE DELETE FROM token_usage",
    "EXPLAIN ANALYZE CREATE MACRO leak(x) AS x",
    "EXPLAIN ANALYZE PRAGMA enable_profiling",
    # statements that write, load or change the session
    "COPY token_usage TO 'rows.csv'",
    "EXPORT DATABASE 'dump'",
    "ATTACH 'other.duckdb' AS other",
    "INSTALL httpfs",
    "LOAD httpfs",
    "UPDATE EXTENSIONS",
    "PRAGMA enable_profiling",
    "CALL checkpoint()",
    "SET enable_external_access = true",
    "RESET memory_limit",
    "USE memory",
    "CREATE MACRO leak(x) AS x",
    "CREATE TEMP TABLE t AS SELECT 1",
    "PREPARE p AS SELECT 1",
    "EXECUTE p",
    "VACUUM",
    # comments and strings that hide a second statement
    "SELECT 1 -- ; nothing here\n; DELETE FROM token_usage",
    "SELECT ';' AS a; COPY token_usage TO 'rows.csv'",
    "SELECT $$;$$ AS a; DROP VIEW calls",
    "/* SELECT */ DELETE FROM token_usage",
]


@pytest.mark.parametrize("query", ESCAPES)
def test_an_escape_is_refused_with_exit_2_and_writes_nothing(
    place: Path, capsys: pytest.CaptureFixture[str], query: str
) -> None:
    before = files(place)
    result = ledger(capsys, "sql", query)
    assert result.code == 2, (result.out, result.err)
    assert "refused" in result.err and "Traceback" not in result.err
    assert files(place) == before
    assert rows(capsys) == 4


@pytest.fixture
def unchecked(place: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Analytics]:
    """The Python API with its statement check taken away: only the engine's doors stand."""
    monkeypatch.setattr("ledger.analytics.read.api.check_read_only", lambda query: None)
    with Analytics() as analytics:
        yield analytics


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("COPY (SELECT * FROM token_usage) TO 'rows.csv'", "disabled by configuration"),
        ("COPY (SELECT 'gone') TO 'ledger.db' (HEADER false)", "disabled by configuration"),
        ("EXPORT DATABASE 'dump'", "disabled by configuration"),
        ("ATTACH 'other.duckdb' AS other", "disabled by configuration"),
        ("INSTALL httpfs", "disabled by configuration"),
        ("LOAD httpfs", "disabled"),
        ("SELECT * FROM read_csv('ledger.db')", "disabled by configuration"),
        ("SET enable_external_access = true", "Cannot enable external access"),
        ("DELETE FROM token_usage", "writes is refused"),
        ("DROP VIEW calls", "writes is refused"),
    ],
)
def test_a_statement_the_check_misses_still_cannot_write(
    unchecked: Analytics, place: Path, query: str, error: str
) -> None:
    before = files(place)
    with pytest.raises(Exception, match=error):  # which class: DuckDB's or ours
        unchecked.sql(query)
    assert files(place) == before
    assert unchecked.sql("SELECT count(*) AS n FROM token_usage").n[0] == 4
    assert len(unchecked.calls()) == 4


@pytest.mark.parametrize(
    "query",
    [
        "EXPLAIN ANALYZE SELECT count(*) FROM token_usage",
        "EXPLAIN (FORMAT json) SELECT 1",
        "EXPLAIN ANALYZE (SELECT 1) UNION (SELECT 2)",
        "SELECT 'EXPLAIN ANALYZE COPY t TO ''x''' AS text -- DELETE",
        "DESCRIBE token_usage",
        "SUMMARIZE SELECT cost_usd FROM token_usage",
        "FROM calls LIMIT 1",
    ],
)
def test_reading_statements_still_run(
    place: Path, capsys: pytest.CaptureFixture[str], query: str
) -> None:
    result = ledger(capsys, "sql", query, "--format", "json")
    assert result.code == 0, result.err
    assert json.loads(result.out)
