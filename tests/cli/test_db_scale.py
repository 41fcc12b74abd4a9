"""``ledger db retention | maintain | partition`` as a shell runs them."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import func, select

from ledger.analytics import Analytics
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from tests.cli.shell import ledger
from tests.store.test_partitions import usage


def _fill(url: str, tmp_path: Path, ages_days: list[int]) -> None:
    now = dt.datetime.now(dt.UTC)
    with Ledger(url, journal_dir=tmp_path / "j") as led:
        for days in ages_days:
            led.record(usage(now - dt.timedelta(days=days), cost_usd=Decimal("1.5")))
        assert led.flush(60)


def _count(url: str) -> int:
    engine = make_engine(url)
    with engine.connect() as conn:
        n = int(conn.execute(select(func.count()).select_from(token_usage)).scalar_one())
    engine.dispose()
    return n


def test_retention_dry_run_shows_rows_and_spend_and_changes_nothing_then_removes_them(
    ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    if "postgresql" in ledger_url:
        ledger_url = request.getfixturevalue("partitioned_pg_url")
    monkeypatch.setenv("LEDGER_DATABASE_URL", ledger_url)
    monkeypatch.setenv("LEDGER_ANALYTICS_PATH", str(tmp_path / "copy.duckdb"))
    _fill(ledger_url, tmp_path, [900, 800, 1])
    with Analytics(ledger_url) as analytics:  # an analytics copy holding all three
        assert analytics.last_sync is not None and analytics.last_sync.rows_total == 3
    dry = ledger(capsys, "db", "retention", "--keep", "400d", "--dry-run")
    assert dry.code == 0, dry.err
    assert "would remove 2 row(s)" in dry.out and "spend $3.000000" in dry.out
    assert _count(ledger_url) == 3
    done = ledger(capsys, "db", "retention", "--keep", "400d")
    assert done.code == 0, done.err
    assert "removed 2 row(s)" in done.out and "spend $3.000000" in done.out
    assert _count(ledger_url) == 1
    # The copy follows incrementally (the change log), not by a rebuild.
    with Analytics(ledger_url) as analytics:
        assert analytics.last_sync is not None and analytics.last_sync.rows_total == 1
        assert int(analytics.sql("SELECT count(*) AS n FROM token_usage")["n"][0]) == 1
        assert analytics.verify().ok
    if "postgresql" in ledger_url:
        assert "dropped partition token_usage_p" in done.out


def test_retention_refuses_a_keep_it_cannot_read(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    result = ledger(capsys, "db", "retention", "--keep", "13 months")
    assert result.code == 2
    assert "whole number of days" in result.err


def test_maintain_and_partition_on_sqlite_say_there_is_nothing_to_do(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LEDGER_DATABASE_URL", sqlite_url)
    result = ledger(capsys, "db", "maintain")
    assert result.code == 0 and "nothing to maintain" in result.out
    result = ledger(capsys, "db", "partition")
    assert result.code == 2 and "partitioning is for PostgreSQL" in result.err


@pytest.mark.postgres
def test_maintain_creates_partitions_ahead_and_partition_says_it_is_done(
    partitioned_pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LEDGER_DATABASE_URL", partitioned_pg_url)
    result = ledger(capsys, "db", "maintain", "--ahead", "14")
    assert result.code == 0, result.err
    far = dt.datetime.now(dt.UTC) + dt.timedelta(days=400)
    assert f"token_usage_p{far:%Y%m}" in result.out
    again = ledger(capsys, "db", "maintain", "--ahead", "14")
    assert again.code == 0 and "0 partition(s) created" in again.out
    done = ledger(capsys, "db", "partition")
    assert done.code == 0 and "already partitioned" in done.out
