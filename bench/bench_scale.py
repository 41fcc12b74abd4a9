"""Benchmark the ledger past one machine (issue 19). PostgreSQL part: ingest.

    .venv/bin/python bench/bench_scale.py [--rows 200000] [--rounds 5] \
        [--pg postgresql://postgres@127.0.0.1/test]

PostgreSQL ingest into the partitioned ``token_usage`` (migration 0006), the
rows spread over three months so every batch crosses partitions:

* the ledger writer's sink (``ledger.store.sink.PostgresSink``: partition
  check, then ``COPY`` into ``token_usage``), batches of 5,000 rows, one
  transaction each;
* the same sink when every batch holds one event stored already (a replay):
  the COPY fails on the unique key, is rolled back, and the batch takes the
  idempotent path (``COPY`` into a temp table, ``INSERT … SELECT … ON
  CONFLICT DO NOTHING``): the worst case, for context;
* the same wire rows through raw ``COPY token_usage FROM STDIN`` in the same
  batches and transactions, the change log's per-row trigger skipped as for the
  writer's batches (which log one range entry each): the physical limit, with no
  idempotency;
* end to end: ``Ledger.record()`` of every event, then ``flush()`` (journal
  included), for context.

Each variant starts from an empty table (``TRUNCATE``); variants are
interleaved round by round and each figure is the median of the rounds.
Target: ledger writer >= 0.8 x raw COPY.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
from bench_ledger import make_events as ledger_events
from psycopg import sql
from sqlalchemy.engine import URL, make_url

from ledger.events import UsageEvent, to_row
from ledger.schema import EVENT_COLUMNS, TABLE_NAME
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from ledger.store.migrate import upgrade
from ledger.store.sink import COPY_TYPES, SINK_LOGS_SETTING, make_sink

BATCH = 5_000
WRITER = "ledger writer (sink: COPY into token_usage)"
RAW_COPY = "raw COPY into token_usage (no idempotency)"
E2E = "end to end: record() + flush()"


def make_events(n: int, start: dt.datetime) -> list[UsageEvent]:
    """``n`` attempts spread evenly over the 90 days from ``start``."""
    return ledger_events(n, start, dt.timedelta(days=90) / max(n, 1))


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:>10,.0f} rows/s"


def _truncate(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(TABLE_NAME)))
        c.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(TABLE_NAME)))


def _count(dsn: str) -> int:
    with psycopg.connect(dsn) as c:
        row = c.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(TABLE_NAME)))
        return int(row.fetchone()[0])  # type: ignore[index]


def writer_round(url: URL, rows: Sequence[tuple[Any, ...]]) -> float:
    engine = make_engine(url)
    sink = make_sink(engine)
    sink.insert(rows[:1])  # connect, temp table, partition list: once per process
    t0 = time.perf_counter()
    for i in range(1, len(rows), BATCH):
        sink.insert(rows[i : i + BATCH])
    seconds = time.perf_counter() - t0
    sink.close()
    engine.dispose()
    return seconds


def replay_round(url: URL, dsn: str, rows: Sequence[tuple[Any, ...]]) -> float:
    """The writer when every batch holds one event stored already (a replay)."""
    copy_rows(dsn, [rows[0], *rows[1::BATCH]])
    return writer_round(url, rows)


def copy_rows(dsn: str, rows: Sequence[tuple[Any, ...]]) -> None:
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(TABLE_NAME), sql.SQL(", ").join(map(sql.Identifier, EVENT_COLUMNS))
    )
    with psycopg.connect(dsn) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        with conn.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)


def copy_round(dsn: str, rows: Sequence[tuple[Any, ...]]) -> float:
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(TABLE_NAME), sql.SQL(", ").join(map(sql.Identifier, EVENT_COLUMNS))
    )
    with psycopg.connect(dsn) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        with conn.cursor() as cur, cur.copy(statement) as copy:
            copy.write_row(rows[0])
        conn.commit()
        t0 = time.perf_counter()
        for i in range(1, len(rows), BATCH):
            # the change log's per-row trigger skipped, as for the writer's batches
            conn.execute("SELECT set_config(%s, 'on', true)", (SINK_LOGS_SETTING,))
            with conn.cursor() as cur, cur.copy(statement) as copy:
                copy.set_types(COPY_TYPES)  # as the writer does: no dumper lookup per value
                for row in rows[i : i + BATCH]:
                    copy.write_row(row)
            conn.commit()
        return time.perf_counter() - t0


def ledger_round(url: URL, events: Sequence[UsageEvent], journal: Path) -> float:
    engine = make_engine(url)
    led = Ledger(engine=engine, journal_dir=journal)
    t0 = time.perf_counter()
    for e in events:
        led.record(e)
    assert led.flush(timeout=600), "the ledger did not flush"
    seconds = time.perf_counter() - t0
    led.close()
    engine.dispose()
    return seconds


def bench_postgres_ingest(pg: str, n: int, rounds: int, tmp: Path) -> None:
    name = f"ledger_bench_{uuid.uuid4().hex[:8]}"
    admin = make_url(pg).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_url(pg).set(drivername="postgresql+psycopg", database=name)
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        start = dt.datetime.now(dt.UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        events = make_events(n, start)
        rows = [to_row(e) for e in events]
        print(
            f"PostgreSQL ingest, partitioned token_usage, {n:,} rows over 3 months, "
            f"{rounds} rounds:"
        )
        variants: dict[str, Callable[[int], float]] = {
            WRITER: lambda r: writer_round(url, rows),
            RAW_COPY: lambda r: copy_round(dsn, rows),
            "ledger writer, a stored event in every batch (staged)": lambda r: replay_round(
                url, dsn, rows
            ),
            E2E: lambda r: ledger_round(url, events, tmp / f"journal-{r}"),
        }
        times: dict[str, list[float]] = {label: [] for label in variants}
        labels = list(variants)
        loads = []
        for r in range(rounds):
            loads.append(os.getloadavg()[0])
            for k in range(len(labels)):  # a rotating order: no variant always goes first
                label = labels[(r + k) % len(labels)]
                run = variants[label]
                _truncate(dsn)
                times[label].append(run(r))
                stored = _count(dsn)
                assert stored == n, f"{label}: {stored} rows stored, expected {n}"
        medians = {label: statistics.median(t) for label, t in times.items()}
        print(
            f"  {dt.datetime.now(dt.UTC):%Y-%m-%d} UTC, load {min(loads):.1f}-{max(loads):.1f} "
            "at the rounds' starts; medians of the rounds, min-max in brackets"
        )
        for label, seconds in medians.items():
            fastest, slowest = min(times[label]), max(times[label])
            print(
                f"  {label:<55} {rate(n - 1, seconds)} "
                f"({(n - 1) / slowest:,.0f}-{(n - 1) / fastest:,.0f})"
            )
        for label, target in ((WRITER, "target >= 0.80"), (E2E, "issue 40: >= 0.80 at load >= 3")):
            # each round's ratio to that round's raw COPY, run beside it
            ratios = sorted(c / w for c, w in zip(times[RAW_COPY], times[label], strict=True))
            print(
                f"  {label} / raw COPY: {statistics.median(ratios):.2f} "
                f"({ratios[0]:.2f}-{ratios[-1]:.2f}; {target})"
            )
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--pg",
        default=os.environ.get("LEDGER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1/test"),
    )
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} CPUs\n")
    with tempfile.TemporaryDirectory() as d:
        bench_postgres_ingest(args.pg, args.rows, args.rounds, Path(d))


if __name__ == "__main__":
    main()
