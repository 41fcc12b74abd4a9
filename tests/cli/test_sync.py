"""``ledger sync``: up to date, rebuilt, and checked against the ledger figure by figure."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from sqlalchemy import delete, select, update

from ledger.cli import cli
from ledger.errors import SchemaOutOfDate
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from ledger.store.migrate import upgrade
from tests.analytics.builders import insert_rows, served

S = {"session_id": "s\x1b[2J", "actor_id": "planner"}  # a control sequence in the data


@pytest.fixture
def analytics_path(ledger_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    insert_rows(ledger_url, [served(i, "A", cost_usd=Decimal("0.25"), **S) for i in range(4)])
    monkeypatch.setenv("LEDGER_DATABASE_URL", ledger_url)
    path = tmp_path / "analytics.duckdb"
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(path))
    return path


def test_sync_takes_inserts_updates_and_deletes_and_verifies(
    ledger_url: str, analytics_path: Path
) -> None:
    runner = CliRunner()
    first = runner.invoke(cli, ["sync"])
    assert first.exit_code == 0, first.output
    assert "rebuilt: 4 added" in first.output
    engine = make_engine(ledger_url)
    with engine.begin() as conn:
        ids = sorted(conn.execute(select(token_usage.c.id)).scalars())
        conn.execute(update(token_usage).where(token_usage.c.id == ids[1]).values(cost_usd=1))
        conn.execute(delete(token_usage).where(token_usage.c.id == ids[2]))
    engine.dispose()
    insert_rows(ledger_url, [served(9, "B", **S)])
    second = runner.invoke(cli, ["sync", "--verify"])
    assert second.exit_code == 0, second.output
    assert "synced: 1 added, 1 updated, 1 deleted; 4 rows in the copy" in second.output
    assert "the copy matches the ledger" in second.output
    again = runner.invoke(cli, ["sync"])
    assert "synced: 0 added, 0 updated, 0 deleted" in again.output


def test_verify_names_every_figure_that_differs_and_full_repairs(analytics_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(cli, ["sync"]).exit_code == 0
    with duckdb.connect(str(analytics_path)) as con:  # a copy gone wrong
        con.execute(
            "UPDATE token_usage SET cost_usd = 2 WHERE id = (SELECT min(id) FROM token_usage)"
        )
    wrong = runner.invoke(cli, ["sync", "--verify"])
    assert wrong.exit_code == 1
    assert 'model/day cost_usd ["m" / "2025-03-01"]: ledger "1.0' in wrong.output
    assert 'copy "2.75' in wrong.output
    assert "\x1b" not in wrong.output  # ledger strings never reach the terminal raw
    assert "`ledger sync --full` rebuilds the copy" in wrong.output
    fixed = runner.invoke(cli, ["sync", "--full", "--verify"])
    assert fixed.exit_code == 0, fixed.output
    assert "the copy matches the ledger" in fixed.output


def test_sync_on_a_ledger_without_the_change_log_says_how_to_fix_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = make_engine(url)
    upgrade(engine, "0001")
    engine.dispose()
    monkeypatch.setenv("LEDGER_DATABASE_URL", url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "a.duckdb"))
    result = CliRunner().invoke(cli, ["sync"])  # main() prints it as "ledger: ..."; exit 2
    assert isinstance(result.exception, SchemaOutOfDate)
    assert "this code needs" in str(result.exception)
    assert "run `ledger db upgrade`" in str(result.exception)
