"""The four Alembic invariants, on SQLite and PostgreSQL, plus a full round trip."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, column, delete, insert, inspect, select, table, update

from ledger.analytics import Analytics
from ledger.errors import SchemaOutOfDate
from ledger.events import UsageEvent, to_row
from ledger.schema import (
    BILLED_COLUMNS,
    EVENT_COLUMNS,
    ledger_changes,
    metadata_for,
    token_usage,
)
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from ledger.store.migrate import (
    alembic_config,
    check_schema,
    downgrade,
    head_revision,
    include_name,
    upgrade,
)
from ledger.store.sink import make_sink


def test_migrations_have_a_single_head() -> None:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    assert heads == [head_revision()]


def test_models_match_the_migrated_schema(engine_for: Engine) -> None:
    with engine_for.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_name": include_name}
        )
        assert compare_metadata(context, metadata_for(conn.dialect.name)) == []


def test_downgrade_to_empty_and_upgrade_again(engine_for: Engine) -> None:
    downgrade(engine_for, "base")
    assert "token_usage" not in inspect(engine_for).get_table_names()
    with pytest.raises(SchemaOutOfDate, match="run `ledger db upgrade`"):
        check_schema(engine_for)
    upgrade(engine_for)
    check_schema(engine_for)
    columns = {c["name"] for c in inspect(engine_for).get_columns("token_usage")}
    assert columns == {c.name for c in token_usage.columns}


def test_every_value_round_trips(ledger_url: str, tmp_path: Path) -> None:
    brt = dt.timezone(dt.timedelta(hours=-3))
    e = UsageEvent(
        started_at=dt.datetime(2026, 11, 30, 9, 15, 30, 123456, tzinfo=brt),
        latency_ms=812.5,
        ttft_ms=140.25,
        session_id="sessão-ünïcødé-会话",
        actor_id="planner",
        session_key="ledger:sessão-ünïcødé-会话:planner",
        requested_provider="openrouter",
        requested_model="anthropic/claude-sonnet-4.6",
        provider="openrouter",
        model="anthropic/claude-4.6-sonnet-20260217",
        upstream="Amazon Bedrock",
        generation_id="gen-1773011158-Ce1hHC4Gr81WIraIsgAJ",
        routing_sort="price",
        routing_order="anthropic,amazon-bedrock",
        status="error",
        error_type="stream_interrupted",
        http_status=200,
        input_tokens=3329,
        output_tokens=53,
        cache_read_tokens=3211,
        cache_write_tokens=115,
        reasoning_tokens=7,
        cost_usd=Decimal("0.0021985501"),
        cost_source="provider",
        response_cache_hit=True,
        streamed=True,
        paused=True,
        locale="pt-BR",
        tags={"env": "prod", "tenant": "açaí", "n": 3, "nested": {"ok": True}},
        usage_details={"input": {"audio": 1917, "text": 16}, "cache_write": {"ttl_1h": 9}},
        attempt=2,
    )
    with Ledger(ledger_url, journal_dir=tmp_path / "journal") as led:
        led.record(e)
        assert led.flush(10)
    engine = make_engine(ledger_url)
    with engine.connect() as conn:
        row = conn.execute(select(token_usage)).one()._asdict()
    engine.dispose()
    assert row.pop("id") >= 1
    assert row["started_at"] == dt.datetime(2026, 11, 30, 12, 15, 30, 123456, tzinfo=dt.UTC)
    assert row["started_at"].utcoffset() == dt.timedelta(0)
    assert isinstance(row["cost_usd"], Decimal)
    for name in BILLED_COLUMNS:  # written by ``ledger reconcile`` only, never by the writer
        assert row.pop(name) is None, name
    for name, value in row.items():
        assert value == getattr(e, name), name


def _insert_one(conn: Any, event_id: str) -> int:
    return int(
        conn.execute(
            insert(token_usage).returning(token_usage.c.id),
            {
                "event_id": event_id,
                "call_id": event_id,
                "attempt": 1,
                "started_at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
                "requested_provider": "p",
                "requested_model": "m",
                "provider": "p",
                "status": "ok",
            },
        ).scalar_one()
    )


def _log(conn: Any) -> list[int]:
    return [int(r) for r in conn.execute(select(ledger_changes.c.row_id).order_by("seq")).scalars()]


def test_the_change_log_is_backfilled_and_logs_every_change(engine_for: Engine) -> None:
    downgrade(engine_for, "0005")
    with engine_for.begin() as conn:  # a ledger from before change tracking
        old = [_insert_one(conn, str(uuid.uuid4())) for _ in range(2)]
    upgrade(engine_for)
    with engine_for.begin() as conn:
        assert _log(conn) == old
        new = _insert_one(conn, str(uuid.uuid4()))
        conn.execute(update(token_usage).where(token_usage.c.id == old[0]).values(cost_usd=1))
        conn.execute(delete(token_usage).where(token_usage.c.id == old[1]))
        assert _log(conn) == [*old, new, old[0], old[1]]
        conn.execute(delete(token_usage))
        conn.execute(delete(ledger_changes))


def test_sqlite_never_hands_out_a_deleted_highest_id_again(sqlite_url: str) -> None:
    engine = make_engine(sqlite_url)
    upgrade(engine)
    with engine.begin() as conn:
        first = _insert_one(conn, str(uuid.uuid4()))
        top = _insert_one(conn, str(uuid.uuid4()))
        conn.execute(delete(token_usage).where(token_usage.c.id == top))
        assert _insert_one(conn, str(uuid.uuid4())) > top > first
    engine.dispose()


def test_0002_keeps_old_rows_marks_them_reported_and_widens_token_counts(
    engine_for: Engine, tmp_path: Path
) -> None:
    # An old schema with a row in it, as a ledger written before 0002 holds.
    downgrade(engine_for, "0001")
    old = {
        "event_id": "00000000-0000-4000-8000-000000000001",
        "call_id": "00000000-0000-4000-8000-000000000002",
        "attempt": 1,
        "started_at": dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC),
        "requested_provider": "openai",
        "requested_model": "gpt-4o-mini",
        "provider": "openai",
        "status": "ok",
        "input_tokens": 2**31 - 1,
        "output_tokens": 7,
    }
    # Only the columns 0001 has: the current table definition would name usage_reported.
    old_table = table("token_usage", *(column(n, token_usage.c[n].type) for n in old))
    with engine_for.begin() as conn:
        conn.execute(insert(old_table), [old])
    upgrade(engine_for)
    with engine_for.connect() as conn:
        row = conn.execute(select(token_usage)).one()
    assert row.usage_reported is True
    assert row.input_tokens == 2**31 - 1 and row.output_tokens == 7
    # 3e9 prompt tokens now fit, on both backends, instead of being clamped.
    big = UsageEvent(
        started_at=dt.datetime(2026, 12, 1, tzinfo=dt.UTC),
        requested_provider="openai",
        requested_model="gpt-4o-mini",
        provider="openai",
        status="ok",
        input_tokens=3_000_000_000,
        cache_read_tokens=2_999_999_999,
        output_tokens=2**40,
        usage_reported=False,
    )
    url = engine_for.url.render_as_string(hide_password=False)
    with Ledger(url, journal_dir=tmp_path / "journal") as led:
        led.record(big)
        assert led.flush(10)
    with engine_for.connect() as conn:
        stored = conn.execute(
            select(token_usage).where(token_usage.c.event_id == big.event_id)
        ).one()
    assert stored.input_tokens == 3_000_000_000 and stored.output_tokens == 2**40
    assert stored.cache_read_tokens == 2_999_999_999 and stored.usage_reported is False


def _rows(n: int) -> list[tuple[Any, ...]]:
    return [
        to_row(
            UsageEvent(
                started_at=dt.datetime(2026, 11, 30, tzinfo=dt.UTC) + dt.timedelta(minutes=i),
                requested_provider="p",
                requested_model="m",
                provider="p",
                status="ok",
                cost_usd=Decimal(i),
            )
        )
        for i in range(n)
    ]


def _write(engine: Engine, n: int) -> None:
    """``n`` rows through the ledger's own writer, in one batch."""
    sink = make_sink(engine)
    try:
        sink.insert(_rows(n))
    finally:
        sink.close()


#: The columns 0008 and 0009 added to token_usage (last in a row): a ledger at 0003
#: lacks them.
_SINCE_0008 = ("policy_id", "arm", "router_attempts")


def _copy_at_0003(engine: Engine, n: int) -> None:
    """``n`` rows by a plain COPY of the columns a ledger at 0003 has."""
    columns = [c for c in EVENT_COLUMNS if c not in _SINCE_0008]
    raw = engine.raw_connection()
    try:
        with raw.cursor() as cur:  # type: ignore[attr-defined]
            names = ", ".join(f'"{c}"' for c in columns)
            with cur.copy(f"COPY token_usage ({names}) FROM STDIN") as copy:
                for row in _rows(n):
                    copy.write_row(row[: len(columns)])
        raw.commit()
    finally:
        raw.close()


def _logged_ids(conn: Any) -> set[int]:
    return {int(r) for r in conn.execute(select(ledger_changes.c.row_id)).scalars()}


@pytest.mark.postgres
def test_0007_keeps_a_postgres_ledger_with_rows_and_its_copy_syncing(
    pg_url: str, tmp_path: Path
) -> None:
    engine = make_engine(pg_url)
    copy = tmp_path / "a.duckdb"
    try:
        _write(engine, 20)  # at head: one range entry
        with engine.begin() as conn:
            _insert_one(conn, str(uuid.uuid4()))
        with Analytics(pg_url, path=copy) as analytics:
            assert analytics.refresh().rows_total == 21
        # Downgraded, the log names every id one entry each, as 0003 reads it.
        downgrade(engine, "0003")
        with engine.connect() as conn:
            ids = set(conn.execute(select(token_usage.c.id)).scalars())
            logged = conn.exec_driver_sql("SELECT row_id FROM ledger_changes").scalars()
            assert {int(i) for i in logged} == ids
        with pytest.raises(SchemaOutOfDate, match="run `ledger db upgrade`"):
            Analytics(pg_url, path=copy)  # its first sync reads the log
        _copy_at_0003(engine, 10)  # a plain COPY, logged by 0003's statement trigger
        with engine.begin() as conn:
            _insert_one(conn, str(uuid.uuid4()))
        upgrade(engine)  # 0007 on a ledger with rows and a log
        _write(engine, 10)
        with engine.begin() as conn:
            _insert_one(conn, str(uuid.uuid4()))
        with Analytics(pg_url, path=copy) as analytics:  # the same copy, incrementally
            result = analytics.last_sync
            assert result is not None
            assert (result.rows_added, result.rows_total, result.rebuilt) == (22, 43, False)
            check = analytics.verify()
            assert check.ok, check.differences
    finally:
        engine.dispose()
