"""``ledger reprice`` over a real ledger: the rows it changed, and precise refusals."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ledger.cli import cli
from tests.analytics.builders import insert_rows, row
from tests.test_reprice import MISTRAL, _costs

PRICES = """
[[tool.ledger.prices]]
provider = "mistral"
model = "mistral-large-latest"
effective_from = 2025-01-01
input = 0.5
output = 1.5
cache_read = 0.05
"""


@pytest.fixture
def project(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    monkeypatch.delenv("LEDGER_PRICES_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text(PRICES)
    return tmp_path


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["reprice", *args], env={"COLUMNS": "200"})


def test_reprice_reports_exactly_the_rows_it_changed(project: Path, sqlite_url: str) -> None:
    rows = [
        row(0, **MISTRAL),
        row(1, **{**MISTRAL, "cost_usd": Decimal("0.0009"), "cost_source": "provider"}),
    ]
    insert_rows(sqlite_url, rows)
    result = run("--since", "all", "--format", "json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert (body["examined"], body["changed"], body["written"]) == (1, 1, True)
    (changed,) = body["rows"]
    assert changed["event_id"] == rows[0]["event_id"]
    assert (changed["old_cost_usd"], changed["old_cost_source"]) == ("0.0005660000", "incomplete")
    assert (changed["new_cost_usd"], changed["new_cost_source"]) == ("0.0000407000", "computed")
    assert _costs(sqlite_url)[rows[1]["event_id"]] == (Decimal("0.0009000000"), "provider")
    again = run("--since", "all")
    assert again.exit_code == 0 and "0 of 1 computed-cost row changed" in again.stdout


def test_bad_prices_exit_2_naming_the_key_and_change_nothing(
    project: Path, sqlite_url: str
) -> None:
    rows = [row(0, **MISTRAL)]
    insert_rows(sqlite_url, rows)
    (project / "pyproject.toml").write_text(PRICES.replace("input = 0.5", "input = -0.5"))
    result = run("--since", "all")
    assert result.exit_code == 2
    assert "tool.ledger.prices[0].input: expected a number of USD per million" in result.stderr
    assert _costs(sqlite_url)[rows[0]["event_id"]] == (Decimal("0.0005660000"), "incomplete")


def test_a_missing_database_is_refused_not_created(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEDGER_DATABASE_URL", f"sqlite:///{project / 'nope.db'}")
    result = run("--since", "7d")
    assert result.exit_code == 2 and "there is no ledger database" in result.stderr
    assert not (project / "nope.db").exists()
