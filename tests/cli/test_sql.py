"""``ledger sql`` reads only: a write is refused by kind and the copy keeps every row."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.analytics.builders import insert_rows, served
from tests.cli.shell import ledger


@pytest.fixture
def four_rows(ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    insert_rows(ledger_url, [served(i, "A", session_id="s", actor_id="a") for i in range(4)])
    monkeypatch.setenv("LEDGER_DATABASE_URL", ledger_url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "analytics.duckdb"))
    return ledger_url


def count(capsys: pytest.CaptureFixture[str]) -> int:
    result = ledger(capsys, "sql", "SELECT count(*) AS n FROM token_usage", "--format", "json")
    assert result.code == 0, result.err
    n: int = json.loads(result.out)[0]["n"]
    return n


@pytest.mark.parametrize(
    ("query", "kind"),
    [
        ("DELETE FROM token_usage", "DELETE"),
        ("UPDATE token_usage SET cost_usd = 0", "UPDATE"),
        ("SELECT 1; DELETE FROM token_usage", "DELETE"),
        ("CREATE TABLE mine AS SELECT * FROM token_usage", "CREATE"),
        ("COPY token_usage TO '/dev/null'", "COPY"),
        ("INSTALL httpfs", "LOAD"),
        ("SET autoload_known_extensions = true", "SET"),
        ("EXPLAIN ANALYZE DELETE FROM token_usage", "DELETE"),
    ],
)
def test_a_writing_statement_is_refused_by_kind_and_changes_nothing(
    four_rows: str, capsys: pytest.CaptureFixture[str], query: str, kind: str
) -> None:
    assert count(capsys) == 4
    result = ledger(capsys, "sql", query)
    assert result.code == 2
    assert result.err.startswith(f"ledger: {kind} statements are refused"), result.err
    assert "Traceback" not in result.err
    assert count(capsys) == 4
    report = ledger(capsys, "report")
    assert report.code == 0 and "no rows yet" not in report.out.split("Cost by")[0]


@pytest.mark.parametrize(
    "query",
    ["WITH x AS (DELETE FROM token_usage RETURNING *) SELECT * FROM x"],
)
def test_a_write_hidden_in_a_reading_statement_is_refused_by_the_read_only_transaction(
    four_rows: str, capsys: pytest.CaptureFixture[str], query: str
) -> None:
    result = ledger(capsys, "sql", query)
    assert result.code == 2
    assert result.err.startswith("ledger: a statement that writes is refused"), result.err
    assert "Traceback" not in result.err
    assert count(capsys) == 4


def test_column_names_are_printed_as_written_not_as_markup(
    four_rows: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = ledger(capsys, "sql", """SELECT 1 AS ":x: [red]h" """)
    assert result.code == 0, result.err
    assert ":x: [red]h" in result.out and "\u274c" not in ascii(result.out)


def test_csv_prints_zero_money_as_a_plain_number(
    four_rows: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = ledger(
        capsys, "sql", "SELECT CAST(0 AS DECIMAL(20, 10)) AS cost_usd", "--format", "csv"
    )
    assert result.out.splitlines() == ["cost_usd", "0.0000000000"]


def test_the_table_shows_values_as_stored_not_rounded(
    four_rows: str, capsys: pytest.CaptureFixture[str]
) -> None:
    query = (
        "SELECT 0.0036306::DOUBLE AS third, CAST(2.1398115 AS DECIMAL(20, 10)) AS cost_usd, "
        "0.25::DOUBLE AS hit_rate, 1234567 AS n"
    )
    result = ledger(capsys, "sql", query)
    assert result.code == 0, result.err
    values = result.out.splitlines()[-1].split()
    # the report's rounding (0.00, $2.14, 25.0%) would hide what the query asked for; a
    # float shows six significant digits (a column of them lines up), a decimal as stored
    assert values == ["0.00363060", "2.1398115", "0.250000", "1,234,567"]


def test_csv_escapes_control_characters_only_on_a_terminal(
    four_rows: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    query = "SELECT 'a' || chr(27) || '[31mRED' AS name, 'x' AS other"
    piped = ledger(capsys, "sql", query, "--format", "csv")
    assert piped.out.splitlines() == ["name,other", "a\x1b[31mRED,x"]  # the data, as stored
    monkeypatch.setattr(type(sys.stdout), "isatty", lambda self: True)  # capsys's stream
    shown = ledger(capsys, "sql", query, "--format", "csv")
    assert shown.out.splitlines() == ["name,other", "a\\x1b[31mRED,x"]


@pytest.mark.parametrize("query", ["", "   ", "/* only a comment */"])
def test_an_empty_query_is_an_error(
    four_rows: str, capsys: pytest.CaptureFixture[str], query: str
) -> None:
    result = ledger(capsys, "sql", query)
    assert result.code == 2
    assert "empty" in result.err and result.out == ""
