"""The writer logs its own batches in the change log; everyone else's writes, the triggers.

On PostgreSQL the writer logs each batch as range entries (``row_id``..``last_id``)
and the row-level insert trigger of migration 0007 skips it; anyone else's inserts
are logged by that trigger, one entry per row.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from ledger.events import UsageEvent, to_row
from ledger.store.engine import make_engine
from ledger.store.sink import PostgresSink, Row, SQLiteSink, rejection_errors

_TRIGGERS = "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"


def _rows(n: int, start: int = 0) -> list[Row]:
    return [
        to_row(
            UsageEvent(
                started_at=dt.datetime(2026, 11, 30, tzinfo=dt.UTC) + dt.timedelta(seconds=i),
                requested_provider="openai",
                requested_model="gpt-4o-mini",
                provider="openai",
                status="ok",
                input_tokens=100 + i,
            )
        )
        for i in range(start, start + n)
    ]


@pytest.fixture
def engine(sqlite_url: str) -> Iterator[Engine]:
    engine = make_engine(sqlite_url)
    yield engine
    engine.dispose()


def _read(engine: Engine, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(make_url(engine.url).database or "") as conn:
        return conn.execute(sql).fetchall()


def test_a_batch_logs_each_new_row_once_in_id_order_and_keeps_the_trigger(
    engine: Engine,
) -> None:
    triggers = _read(engine, _TRIGGERS)
    sink = SQLiteSink(engine)
    rows = _rows(5)
    assert sink.insert(rows) == 5
    assert sink.insert([*rows[:2], *_rows(2, start=5)]) == 2  # two were stored already
    sink.close()
    ids = [i for (i,) in _read(engine, "SELECT id FROM token_usage ORDER BY id")]
    logged = [i for (i,) in _read(engine, "SELECT row_id FROM ledger_changes ORDER BY seq")]
    assert logged == ids and len(ids) == 7
    assert _read(engine, _TRIGGERS) == triggers


def test_an_insert_by_anyone_else_is_still_logged(engine: Engine) -> None:
    sink = SQLiteSink(engine)
    sink.insert(_rows(3))
    sink.close()
    with sqlite3.connect(make_url(engine.url).database or "") as conn:
        conn.execute(
            "INSERT INTO token_usage (event_id, call_id, attempt, started_at, "
            "requested_provider, requested_model, provider, status) VALUES "
            "('by-hand', 'c', 1, '2026-11-30 00:00:00', 'openai', 'm', 'openai', 'ok')"
        )
        conn.execute("UPDATE token_usage SET input_tokens = 0 WHERE id = 1")
        conn.execute("DELETE FROM token_usage WHERE id = 2")
    logged = [i for (i,) in _read(engine, "SELECT row_id FROM ledger_changes ORDER BY seq")]
    assert logged == [1, 2, 3, 4, 1, 2]


def test_a_refused_batch_logs_nothing_and_keeps_the_trigger(engine: Engine) -> None:
    triggers = _read(engine, _TRIGGERS)
    sink = SQLiteSink(engine)
    bad = list(_rows(1)[0])
    bad[0] = None  # event_id is NOT NULL
    with pytest.raises(rejection_errors(engine)):
        sink.insert([*_rows(2), tuple(bad)])
    assert sink.insert(_rows(1, start=7)) == 1
    sink.close()
    stored = _read(engine, "SELECT id FROM token_usage")
    assert len(stored) == 1
    assert _read(engine, "SELECT row_id FROM ledger_changes") == stored
    assert _read(engine, _TRIGGERS) == triggers


def _pg_read(url: str, sql: str, *params: object) -> list[tuple[object, ...]]:
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql, params).fetchall()


#: The ids the log names above a seq, one per id, in log order (ranges expanded).
_PG_LOGGED = (
    "SELECT generate_series(row_id, coalesce(last_id, row_id)) FROM ledger_changes "
    "WHERE seq > %s ORDER BY seq"
)


@pytest.mark.postgres
@pytest.mark.parametrize("layout", ["pg_url", "partitioned_pg_url"])
def test_postgres_logs_the_writers_rows_and_anyone_elses_once_each(
    layout: str, request: pytest.FixtureRequest
) -> None:
    url: str = request.getfixturevalue(layout)
    (start,) = _pg_read(url, "SELECT coalesce(max(seq), 0) FROM ledger_changes")[0]
    engine = make_engine(url)
    sink = PostgresSink(engine)
    rows = _rows(5)
    assert sink.insert(rows) == 5
    assert sink.insert([*rows[:2], *_rows(2, start=5)]) == 2  # a replay: the idempotent path
    sink.close()
    engine.dispose()
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:  # someone else, in one statement and in one row
        conn.execute(
            "INSERT INTO token_usage (event_id, call_id, attempt, started_at, "
            "requested_provider, requested_model, provider, status) "
            "SELECT 'by-hand-' || n, 'c', 1, '2026-11-30 00:00:00+00', 'openai', 'm', 'openai', "
            "'ok' FROM generate_series(1, 3) n"
        )
    ids = [i for (i,) in _pg_read(url, "SELECT id FROM token_usage ORDER BY id")]
    logged = [i for (i,) in _pg_read(url, _PG_LOGGED, start)]
    assert len(ids) == 10
    assert sorted(logged) == ids  # every row, once
    # the writer's own batch is logged in its id order
    assert logged[:5] == ids[:5]


@pytest.mark.postgres
def test_postgres_a_refused_batch_logs_nothing(pg_url: str) -> None:
    (start,) = _pg_read(pg_url, "SELECT coalesce(max(seq), 0) FROM ledger_changes")[0]
    engine = make_engine(pg_url)
    sink = PostgresSink(engine)
    bad = list(_rows(1)[0])
    bad[0] = None  # event_id is NOT NULL
    with pytest.raises(rejection_errors(engine)):
        sink.insert([*_rows(2), tuple(bad)])
    assert sink.insert(_rows(1, start=7)) == 1
    sink.close()
    engine.dispose()
    stored = _pg_read(pg_url, "SELECT id FROM token_usage")
    assert len(stored) == 1
    assert _pg_read(pg_url, _PG_LOGGED, start) == stored


_BY_HAND = (
    "INSERT INTO token_usage (event_id, call_id, attempt, started_at, requested_provider, "
    "requested_model, provider, status) SELECT 'by-hand-' || n, 'c', 1, "
    "'2026-11-30 00:00:00+00', 'openai', 'm', 'openai', 'ok' FROM generate_series(1, %s) n"
)


@pytest.mark.postgres
@pytest.mark.parametrize("layout", ["pg_url", "partitioned_pg_url"])
def test_postgres_a_sink_batch_is_one_range_entry_and_a_plain_insert_one_entry_a_row(
    layout: str, request: pytest.FixtureRequest
) -> None:
    url: str = request.getfixturevalue(layout)
    (start,) = _pg_read(url, "SELECT coalesce(max(seq), 0) FROM ledger_changes")[0]
    engine = make_engine(url)
    sink = PostgresSink(engine)
    assert sink.insert(_rows(50)) == 50
    sink.close()
    engine.dispose()
    ids = [i for (i,) in _pg_read(url, "SELECT id FROM token_usage ORDER BY id")]
    entries = "SELECT row_id, last_id FROM ledger_changes WHERE seq > %s ORDER BY seq"
    # one entry for the whole batch: the trigger skipped its 50 rows
    assert _pg_read(url, entries, start) == [(ids[0], ids[-1])]
    assert ids == list(range(ids[0], ids[0] + 50))
    (mid,) = _pg_read(url, "SELECT max(seq) FROM ledger_changes")[0]
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn) as conn:  # another client, not setting the writer's flag
        conn.execute(_BY_HAND, (3,))
    by_hand = [i for (i,) in _pg_read(url, "SELECT id FROM token_usage ORDER BY id")][50:]
    assert _pg_read(url, entries, mid) == [(i, None) for i in by_hand]
