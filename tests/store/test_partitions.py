"""Monthly partitions on PostgreSQL: the migrated shape, the writer across a month
boundary, partitions created ahead, the default partition as a safety net."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, insert, text

from ledger.events import UsageEvent
from ledger.schema import token_usage
from ledger.store import partitions
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger

pytestmark = pytest.mark.postgres


def usage(started_at: dt.datetime, **changes: Any) -> UsageEvent:
    e = UsageEvent(
        started_at=started_at,
        requested_provider="openai",
        requested_model="gpt-4o-mini",
        provider="openai",
        status="ok",
        input_tokens=10,
        output_tokens=2,
        cost_usd=Decimal("0.25"),
        cost_source="computed",
    )
    return e.replace(**changes)


@pytest.fixture
def engine(partitioned_pg_url: str) -> Iterator[Engine]:
    engine = make_engine(partitioned_pg_url)
    yield engine
    engine.dispose()


def where_rows_are(engine: Engine) -> dict[str, str]:
    """event_id -> the partition holding it."""
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT event_id, tableoid::regclass::text FROM token_usage"))
        return {r[0]: r[1] for r in rows}


def test_a_new_postgres_ledger_is_partitioned_by_month_with_a_brin_index(engine: Engine) -> None:
    with engine.connect() as conn:
        kind = conn.execute(
            text(
                "SELECT partstrat, pg_get_partkeydef(partrelid) FROM pg_partitioned_table "
                "WHERE partrelid = 'token_usage'::regclass"
            )
        ).one()
        method = conn.execute(
            text(
                "SELECT am.amname FROM pg_class c JOIN pg_am am ON am.oid = c.relam "
                "WHERE c.relname = 'ix_token_usage_started_at'"
            )
        ).scalar_one()
        pk = conn.execute(
            text(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
                "WHERE conname = 'pk_token_usage'"
            )
        ).scalar_one()
    assert kind == ("r", "RANGE (started_at)")
    assert method == "brin"
    assert pk == "PRIMARY KEY (id, started_at)"


def test_the_writer_writes_across_a_month_boundary_into_partitions_it_created(
    partitioned_pg_url: str, engine: Engine, tmp_path: Path
) -> None:
    # Far from today, so no partition of these months exists before the writer runs.
    before = dt.datetime(2031, 1, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)
    after = dt.datetime(2031, 2, 1, 0, 0, tzinfo=dt.UTC)
    local = dt.datetime(2031, 2, 1, 0, 30, tzinfo=dt.timezone(dt.timedelta(hours=3)))  # Jan in UTC
    events = [usage(before), usage(after), usage(local)]
    with engine.connect() as conn:
        assert {(2031, 1), (2031, 2)}.isdisjoint(
            partitions.months(conn.connection.driver_connection)
        )
    with Ledger(partitioned_pg_url, journal_dir=tmp_path / "j") as led:
        for e in events:
            led.record(e)
        assert led.flush(60)
        # A replay of the same events stores nothing twice: idempotent on event_id.
        for e in events:
            led.record(e)
        assert led.flush(60)
    placed = where_rows_are(engine)
    assert placed == {
        events[0].event_id: "token_usage_p203101",
        events[1].event_id: "token_usage_p203102",
        events[2].event_id: "token_usage_p203101",
    }
    with engine.connect() as conn:
        have = partitions.months(conn.connection.driver_connection)
    # ...and this month and the next ones were created ahead of time.
    assert set(partitions.ahead(dt.datetime.now(dt.UTC))) <= have


def test_a_row_for_a_month_without_partition_is_kept_and_maintain_moves_it(
    engine: Engine,
) -> None:
    stray = dt.datetime(2019, 6, 15, tzinfo=dt.UTC)
    event_id = str(uuid.uuid4())
    with engine.begin() as conn:  # a hand-made insert, bypassing the writer
        conn.execute(
            insert(token_usage),
            {
                "event_id": event_id,
                "call_id": event_id,
                "attempt": 1,
                "started_at": stray,
                "requested_provider": "p",
                "requested_model": "m",
                "provider": "p",
                "status": "ok",
            },
        )
    assert where_rows_are(engine)[event_id] == partitions.DEFAULT_PARTITION
    raw = engine.raw_connection()
    try:
        created = partitions.maintain(raw.driver_connection, dt.datetime.now(dt.UTC))
    finally:
        raw.close()
    assert partitions.Created((2019, 6), 1) in created
    assert where_rows_are(engine)[event_id] == "token_usage_p201906"


def test_month_helpers() -> None:
    assert partitions.months_between((2025, 11), (2026, 2)) == [
        (2025, 11),
        (2025, 12),
        (2026, 1),
        (2026, 2),
    ]
    assert partitions.month_of_wire("2026-12-31 23:59:59.999999") == (2026, 12)
    assert partitions.parse_partition_name("token_usage_p202612") == (2026, 12)
    assert partitions.parse_partition_name("token_usage_default") is None
    assert partitions.is_partition("token_usage_default")
    assert not partitions.is_partition("token_usage")
