"""Retention: whole month partitions on PostgreSQL, batched deletes on SQLite."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select, text

from ledger.schema import token_usage
from ledger.store import partitions, retention
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from tests.store.test_partitions import usage

NOW = dt.datetime(2030, 7, 10, 12, 0, tzinfo=dt.UTC)


def fill(url: str, tmp_path: Path, days_ago: list[float]) -> None:
    with Ledger(url, journal_dir=tmp_path / "j") as led:
        for i, days in enumerate(days_ago):
            led.record(usage(NOW - dt.timedelta(days=days), cost_usd=Decimal(i + 1)))
        assert led.flush(60)


def count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(token_usage)).scalar_one())


def test_keep_is_a_number_of_days() -> None:
    assert retention.parse_keep("400d") == dt.timedelta(days=400)
    for bad in ("400", "13m", "-1d", "0d", "1y", ""):
        with pytest.raises(retention.BadRetention, match="whole number of days"):
            retention.parse_keep(bad)


@pytest.mark.postgres
def test_postgres_drops_exactly_the_months_that_end_before_the_cutoff(
    partitioned_pg_url: str, tmp_path: Path
) -> None:
    engine = make_engine(partitioned_pg_url)
    # 2030-07-10 minus 100 days = 2030-04-01 12:00: March and older go, April stays whole.
    ages = [200, 160, 102, 101, 99, 50, 0]  # 2029-12-22, 2030-01-31, 03-30, 03-31, 04-02, ...
    fill(partitioned_pg_url, tmp_path, ages)
    keep = dt.timedelta(days=100)
    plan = retention.plan(engine, keep, NOW)
    assert plan.method == "drop partitions"
    assert plan.cutoff == dt.datetime(2030, 4, 1, tzinfo=dt.UTC)
    # Every partition of a month before April goes (empty ones too), none after.
    old = {"token_usage_p202912", "token_usage_p203001", "token_usage_p203003"}
    assert old <= set(plan.partitions)
    assert all(partitions.parse_partition_name(n) < (2030, 4) for n in plan.partitions)  # type: ignore[operator]
    assert (plan.rows, plan.spend) == (4, Decimal(1 + 2 + 3 + 4))
    assert count(engine) == 7  # the dry run changed nothing
    done = retention.apply(engine, keep, NOW)
    assert (done.rows, done.spend, done.partitions) == (4, Decimal(10), plan.partitions)
    with engine.connect() as conn:
        left = partitions.months(conn.connection.driver_connection)
        oldest = conn.execute(select(func.min(token_usage.c.started_at))).scalar_one()
    assert not left & {(2029, 12), (2030, 1), (2030, 3)}
    assert (2030, 4) in left
    assert oldest == NOW - dt.timedelta(days=99)
    assert count(engine) == 3
    # Nothing left to drop: a second run removes nothing.
    assert retention.apply(engine, keep, NOW).rows == 0
    engine.dispose()


def logged_since(engine: Engine, seq: int) -> list[int]:
    with engine.connect() as conn:
        return list(
            conn.execute(
                text(  # one id per entry, ranges (the writer's batches) expanded
                    "SELECT generate_series(row_id, coalesce(last_id, row_id)) "
                    "FROM ledger_changes WHERE seq > :seq ORDER BY seq"
                ),
                {"seq": seq},
            ).scalars()
        )


@pytest.mark.postgres
def test_the_change_log_sees_writes_to_partitions_and_the_partitions_retention_drops(
    partitioned_pg_url: str, tmp_path: Path
) -> None:
    """The change log (migrations 0003, 0007) is how the analytics copy follows the ledger."""
    engine = make_engine(partitioned_pg_url)
    with engine.connect() as conn:
        start = conn.execute(text("SELECT coalesce(max(seq), 0) FROM ledger_changes")).scalar_one()
    try:
        # The writer logs its COPY into the partitioned table itself.
        fill(partitioned_pg_url, tmp_path, [300, 0])
        with engine.connect() as conn:
            ids = dict(conn.execute(select(token_usage.c.started_at, token_usage.c.id)).all())
        old_id = ids[min(ids)]
        assert sorted(logged_since(engine, start)) == sorted(ids.values())
        # Dropping a partition fires nothing: retention logs the ids itself.
        assert retention.apply(engine, dt.timedelta(days=30), NOW).rows == 1
        logged = logged_since(engine, start)
        assert logged[-1] == old_id and len(logged) == 3
    finally:
        engine.dispose()


def test_sqlite_deletes_the_rows_before_the_cutoff_in_batches(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "DELETE_BATCH", 2)
    engine = make_engine(sqlite_url)
    fill(sqlite_url, tmp_path, [500, 401, 400.5, 399.9, 10, 0])
    keep = dt.timedelta(days=400)
    plan = retention.plan(engine, keep, NOW)
    assert plan.method == "batched delete"
    assert plan.cutoff == NOW - keep
    assert (plan.rows, plan.spend) == (3, Decimal(6))
    assert count(engine) == 6
    done = retention.apply(engine, keep, NOW)
    assert (done.rows, done.spend) == (3, Decimal(6))
    with engine.connect() as conn:
        oldest = conn.execute(select(func.min(token_usage.c.started_at))).scalar_one()
    assert oldest == NOW - dt.timedelta(days=399.9)
    engine.dispose()


@pytest.mark.postgres
def test_a_month_detached_by_an_interrupted_run_is_finished_by_the_next(
    partitioned_pg_url: str, tmp_path: Path
) -> None:
    engine = make_engine(partitioned_pg_url)
    fill(partitioned_pg_url, tmp_path, [300, 0])
    old = partitions.partition_name(partitions.month_of(NOW - dt.timedelta(days=300)))
    with engine.begin() as conn:  # the first step of a run that then died
        conn.execute(text(f"ALTER TABLE token_usage DETACH PARTITION {old}"))
    assert count(engine) == 1
    done = retention.apply(engine, dt.timedelta(days=30), NOW)
    assert old in done.partitions and (done.rows, done.spend) == (1, Decimal(1))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT to_regclass(:n)"), {"n": old}).scalar() is None
    engine.dispose()
