"""What ``ledger sql`` prints, piped: floats at 6 significant digits, one boolean spelling
in tables and CSV, rows in the query's order (else the same order every time), counts
with agreeing nouns, and no line padded or wrapped to a width nobody asked for."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from tests.analytics.builders import insert_rows, served
from tests.cli.shell import ledger

RATES = "SELECT actor_id, 1.0 / 3 AS third, actor_id = 'b' AS is_b FROM token_usage"


@pytest.fixture
def three_agents(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    # inserted out of name order: an unordered query must not show insertion order by luck
    rows = [served(i, "A", session_id=f"s{i}", actor_id=a) for i, a in enumerate("cab")]
    insert_rows(sqlite_url, rows)
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "analytics.duckdb"))
    monkeypatch.delenv("COLUMNS", raising=False)
    return sqlite_url


def test_a_piped_table_rounds_floats_and_spells_booleans_as_csv_does(
    three_agents: str, capsys: pytest.CaptureFixture[str]
) -> None:
    table = ledger(capsys, "sql", RATES)
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert lines[0] == "3 rows"
    body = [line.split() for line in lines[3:]]
    assert body == [["a", "0.333333", "false"], ["b", "0.333333", "true"],
                    ["c", "0.333333", "false"]]  # fmt: skip
    assert max(len(line) for line in lines) == len(lines[2])  # the table's own width, no more

    rows = list(csv.reader(io.StringIO(ledger(capsys, "sql", RATES, "--format", "csv").out)))
    assert rows[1:] == [["a", "0.3333333333333333", "false"], ["b", "0.3333333333333333", "true"],
                        ["c", "0.3333333333333333", "false"]]  # fmt: skip


def test_an_order_by_is_kept_and_one_row_is_one_row(
    three_agents: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ordered = ledger(capsys, "sql", "SELECT actor_id FROM token_usage ORDER BY actor_id DESC")
    assert [line.strip() for line in ordered.out.splitlines()[3:]] == ["c", "b", "a"]
    one = ledger(capsys, "sql", "SELECT actor_id FROM token_usage WHERE actor_id = 'a'")
    assert one.out.splitlines()[0] == "1 row"


def test_a_wide_piped_table_stays_a_table_on_one_line_per_row(
    three_agents: str, capsys: pytest.CaptureFixture[str]
) -> None:
    wide = "SELECT actor_id, " + ", ".join(f"'{'x' * 30}' AS c{i}" for i in range(8))
    result = ledger(capsys, "sql", wide + " FROM token_usage")
    lines = result.out.splitlines()
    assert len(lines) == 3 + 3 and "record" not in result.out  # no fallback to blocks
    assert all(line.count("x" * 30) == 8 for line in lines[3:])  # never wrapped mid-value
