"""PostgreSQL parts of bench_analytics: syncs among change-log gaps, and the cost of the log.

Kept beside bench_analytics.py (which imports it) so each file stays readable.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import adbc_driver_postgresql.dbapi
import duckdb
import psycopg
from sqlalchemy.engine import make_url

from ledger.analytics import Analytics
from ledger.events import UsageEvent, to_row
from ledger.schema import TABLE_NAME
from ledger.store.engine import make_engine
from ledger.store.migrate import upgrade
from ledger.store.sink import make_sink

#: The columns the SQLite-flavoured generator produces, cast to PostgreSQL's types.
_PG_CASTS = {
    "started_at": "{c}::timestamp AT TIME ZONE 'UTC'",
    "cost_usd": "{c}::numeric(20, 10)",
    "response_cache_hit": "{c} <> 0",
    "streamed": "{c} <> 0",
    "paused": "{c} <> 0",
}


def _median(values: list[float]) -> float:
    return statistics.median(values)


@contextmanager
def bench_database(server_url: str, name: str) -> Iterator[str]:
    """A database of its own on the server (dropped after), as a SQLAlchemy URL."""
    admin = make_url(server_url).set(drivername="postgresql")
    plain = admin.render_as_string(hide_password=False)
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin.set(drivername="postgresql+psycopg", database=name).render_as_string(
            hide_password=False
        )
    finally:
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _plain(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def build_pg_ledger(url: str, rows: int, generator_sql: str) -> None:
    """A migrated PostgreSQL ledger of ``rows`` rows, bulk-loaded with the log backfilled
    (as migration 0003 backfills an existing ledger)."""
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    gen = duckdb.connect()
    gen.execute("SET TimeZone = 'UTC'")
    reader = gen.sql(generator_sql, params={"first": 1, "stop": rows + 1}).to_arrow_reader(262_144)
    columns = [f.name for f in reader.schema]
    with adbc_driver_postgresql.dbapi.connect(_plain(url)) as con:
        with con.cursor() as cur:
            cur.adbc_ingest("bench_stage", reader, mode="create")
            select = ", ".join(_PG_CASTS.get(c, "{c}").format(c=c) for c in columns)
            cur.execute(f"ALTER TABLE {TABLE_NAME} DISABLE TRIGGER USER")
            cur.execute(
                f"INSERT INTO {TABLE_NAME} ({', '.join(columns)}) SELECT {select} FROM bench_stage"
            )
            cur.execute(f"ALTER TABLE {TABLE_NAME} ENABLE TRIGGER USER")
            cur.execute(f"INSERT INTO ledger_changes (row_id) SELECT id FROM {TABLE_NAME}")
            cur.execute("DROP TABLE bench_stage")
            cur.execute(f"SELECT setval(pg_get_serial_sequence('{TABLE_NAME}', 'id'), {rows})")
        con.commit()
    gen.close()
    with psycopg.connect(_plain(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def _event(i: int, session: str = "bench-late") -> UsageEvent:
    return UsageEvent(
        started_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i),
        session_id=session,
        actor_id="bench",
        requested_provider="openrouter",
        requested_model="m-bench",
        provider="openrouter",
        upstream="Together",
        status="ok",
        input_tokens=100,
        output_tokens=10,
        cost_usd=Decimal("0.0001"),
        cost_source="computed",
        latency_ms=200.0,
        event_id=str(uuid.uuid4()),
        call_id=str(uuid.uuid4()),
    )


_INSERT = (
    f"INSERT INTO {TABLE_NAME} (event_id, call_id, attempt, started_at, requested_provider, "
    "requested_model, provider, status, session_id, actor_id) "
    "VALUES (gen_random_uuid()::text, gen_random_uuid()::text, 1, now(), 'openrouter', "
    "'m-bench', 'openrouter', 'ok', 'bench-late', 'bench')"
)
# n committed rows, each after a seq burnt as a rolled-back transaction's would be:
# n gaps in the change log, made in one round trip.
_GAPS = f"""
DO $$ BEGIN
    FOR i IN 1..%(n)s LOOP
        PERFORM nextval(pg_get_serial_sequence('ledger_changes', 'seq'));
        {_INSERT};
    END LOOP;
END $$
"""


def bench_gaps(url: str, analytics_path: Path, gaps: int, rounds: int) -> None:
    """Syncs while ``gaps`` change-log gaps stay open (transactions hold the xmin back)."""
    t, analytics = _timed(lambda: Analytics(url, path=analytics_path))
    print(f"pg initial sync     {t:8.2f} s")
    holders = []
    for _ in range(rounds):  # each holds one late row and the xmin horizon
        conn = psycopg.connect(_plain(url))
        conn.execute(_INSERT)
        holders.append(conn)
    with psycopg.connect(_plain(url), autocommit=True) as conn:
        conn.execute(_GAPS % {"n": gaps})
    t, res = _timed(analytics.refresh)
    print(f"pg sync making gaps {t:8.3f} s  ({res.rows_added:,} rows, {res.gaps_open:,} gaps open)")
    idle, late, open_gaps = [], [], res.gaps_open
    for holder in holders:
        for _ in range(3):
            t, res = _timed(analytics.refresh)
            assert res.up_to_date_already, res
            idle.append(t)
            open_gaps = min(open_gaps, res.gaps_open)
        holder.commit()
        holder.close()
        t, res = _timed(analytics.refresh)
        assert res.rows_added == 1, res
        late.append(t)
    print(
        f"pg nothing new, >= {open_gaps:,} open gaps  median {_median(idle):6.3f} s "
        f"(n={len(idle)}; target <= 0.2 s)"
    )
    print(
        f"pg one late row among them  median {_median(late):6.3f} s "
        f"(n={len(late)}; target <= 0.5 s)"
    )
    t, res = _timed(analytics.refresh)
    print(f"pg gaps after every holder ended: {res.gaps_open:,} open (closed by the xmin horizon)")
    check = analytics.verify()
    print(f"pg verify after the gap runs: {'matches' if check.ok else check.differences[:5]}")
    analytics.close()


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def _trigger_switch(url: str) -> Callable[[bool], None]:
    """``switch(on)``: the change log kept or not (PostgreSQL: the triggers ENABLEd or
    DISABLEd, and ``ledger_changes.last_id`` added or dropped, without which the writer
    finds no range entries to log its batches with and writes a plain COPY (migration
    0007); SQLite, which cannot disable a trigger: dropped and created again from their
    own SQL). A sink decides when it connects: make one after switching."""
    if make_url(url).get_backend_name() == "postgresql":

        def pg(on: bool) -> None:
            with psycopg.connect(_plain(url), autocommit=True) as conn:
                action = "ENABLE" if on else "DISABLE"
                conn.execute(f"ALTER TABLE {TABLE_NAME} {action} TRIGGER USER")
                column = (
                    "ADD COLUMN IF NOT EXISTS last_id bigint"
                    if on
                    else "DROP COLUMN IF EXISTS last_id"
                )
                conn.execute(f"ALTER TABLE ledger_changes {column}")

        return pg
    path = make_url(url).database
    with sqlite3.connect(str(path)) as con:
        saved = con.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?",
            (TABLE_NAME,),
        ).fetchall()

    def sqlite(on: bool) -> None:
        con = sqlite3.connect(str(path))
        try:
            for name, sql in saved:
                con.execute(f'DROP TRIGGER IF EXISTS "{name}"')
                if on:
                    con.execute(sql)
            con.commit()
        finally:
            con.close()

    return sqlite


def bench_writer_overhead(url: str, rows: int, rounds: int, batch: int = 5_000) -> None:
    """The ledger's writer (its sink: on PostgreSQL COPY + INSERT … SELECT, on SQLite an
    executemany) with the change-log triggers on and off, in ABBA order; medians of rows/s."""
    engine = make_engine(url)
    switch = _trigger_switch(url)
    results: dict[bool, list[float]] = {True: [], False: []}
    n = 0
    try:
        for r in range(2 * rounds):
            logged = r % 2 == 0 if (r // 2) % 2 == 0 else r % 2 == 1  # ABBA order
            switch(logged)
            data = [to_row(_event(n + i, "bench-writer")) for i in range(rows)]
            n += rows
            sink = make_sink(engine)
            sink.insert(data[:1])  # connects (and looks at the log) before the clock starts
            started = time.perf_counter()
            for i in range(1, rows, batch):
                sink.insert(data[i : i + batch])
            results[logged].append((rows - 1) / (time.perf_counter() - started))
            sink.close()
    finally:
        switch(True)
        engine.dispose()
    on, off = _median(results[True]), _median(results[False])
    print(
        f"{engine.dialect.name} writer, change log on {on:10,.0f} rows/s   off (baseline) "
        f"{off:10,.0f} rows/s   overhead {100 * (1 - on / off):5.1f} %  (median of {rounds} "
        f"interleaved rounds of {rows:,} rows; target <= 10 %)"
    )
