"""``ledger report``, ``ledger sql`` and ``ledger export`` over a small hand-built ledger."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from ledger.cli import cli
from tests.analytics.builders import failed, insert_rows, served

S = {"session_id": "s", "actor_id": "planner", "session_key": "k"}


@pytest.fixture
def runner(ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    insert_rows(
        ledger_url,
        [
            served(0, "A", cost_usd=Decimal("0.25"), **S),
            served(1, "A", cost_usd=Decimal("0.5"), **S),
            failed(1500, "A", call_id="fb", **S),  # the next day, falls back to Anthropic
            served(
                1500.01,
                None,
                call_id="fb",
                attempt=2,
                provider="anthropic",
                cost_usd=Decimal("1"),
                **S,
            ),
        ],
    )
    monkeypatch.setenv("LEDGER_DATABASE_URL", ledger_url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "analytics.duckdb"))
    return CliRunner()


def test_report_prints_every_section(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["report"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for title in (
        "Sticky routing per agent",
        "Prompt-cache hits per agent",
        "Cost by responding provider",
        "Fallbacks",
        "provider.order verdicts",
    ):
        assert title in result.output
    assert "planner" in result.output and "insufficient data" in result.output
    assert "$1.00" in result.output and "$0.7500" in result.output
    assert "Stickiness failures: " in result.output and "see the switch_costs view" in result.output
    again = runner.invoke(cli, ["report"], env={"COLUMNS": "200"})
    assert again.output == result.output  # the same ledger, the same report, line for line


def test_sql_prints_csv_and_json(runner: CliRunner) -> None:
    query = "SELECT responding_provider, cost_usd FROM cost_attribution ORDER BY 1"
    csv = runner.invoke(cli, ["sql", query, "--format", "csv"])
    assert csv.exit_code == 0, csv.output
    assert csv.output.splitlines() == [
        "responding_provider,cost_usd",
        "anthropic,1.0000000000",
        "openrouter,0.7500000000",
    ]
    as_json = runner.invoke(cli, ["sql", query, "--format", "json"])
    assert json.loads(as_json.output) == [
        {"responding_provider": "anthropic", "cost_usd": "1.0000000000"},
        {"responding_provider": "openrouter", "cost_usd": "0.7500000000"},
    ]
    table = runner.invoke(cli, ["sql", "SELECT count(*) AS n FROM calls"])
    assert table.exit_code == 0 and "3" in table.output


def test_sql_output_holds_only_the_data_however_long_the_sync_takes(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A zero delay is what a loaded machine does to a slow sync: the bar's turn
    # comes before the data. It must not reach the data's stream (nor stderr,
    # which is not a terminal here).
    monkeypatch.setattr("ledger.cli.report.PROGRESS_DELAY_S", 0.0)
    result = runner.invoke(cli, ["sql", "SELECT 1 AS one", "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == ["one", "1"]


def test_sql_json_handles_list_and_struct_columns(runner: CliRunner) -> None:
    query = "SELECT [1, 2] AS ids, {'usd': 1.5::DECIMAL(20,10), 'tags': ['a', NULL]} AS s"
    result = runner.invoke(cli, ["sql", query, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [
        {"ids": [1, 2], "s": {"usd": "1.5000000000", "tags": ["a", None]}}
    ]


def test_sql_reports_a_bad_query_without_a_traceback(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["sql", "SELEC nothing"])
    assert result.exit_code == 1
    assert "query failed" in result.output and "Traceback" not in result.output


def test_export_writes_parquet_partitioned_by_day(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "parquet"
    result = runner.invoke(cli, ["export", str(out)])
    assert result.exit_code == 0, result.output
    assert "4 new rows in 2 files" in result.output
    days = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert days == ["date=2025-03-01", "date=2025-03-02"]
    with duckdb.connect() as con:
        rows = con.execute(
            f"SELECT date, count(*), sum(cost_usd), typeof(any_value(started_at)) FROM "
            f"read_parquet('{out}/*/*.parquet', hive_partitioning = true) GROUP BY 1 ORDER BY 1"
        ).fetchall()
    assert [(str(d), n, s) for d, n, s, _ in rows] == [
        ("2025-03-01", 2, Decimal("0.75")),
        ("2025-03-02", 2, Decimal("1")),
    ]
    assert rows[0][3] == "TIMESTAMP WITH TIME ZONE"
