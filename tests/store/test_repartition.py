"""``ledger db partition``: an existing plain PostgreSQL ledger becomes the partitioned
one online, while another process keeps recording, losing nothing."""

from __future__ import annotations

import datetime as dt
import mmap
import os
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, insert, inspect, select, text

from ledger.events import UsageEvent, to_row
from ledger.schema import token_usage
from ledger.store import partitions, repartition
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger
from ledger.store.migrate import downgrade, upgrade
from ledger.store.sink import PostgresSink
from tests.cli.shell import ledger
from tests.store.test_partitions import usage

from .record_child import event_id

pytestmark = pytest.mark.postgres

CHILD = Path(__file__).with_name("steady_child.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def plain_ledger(pg_url: str) -> Iterator[Engine]:
    """The session's ledger rebuilt as it was before partitioning: revision 0005, plain."""
    engine = make_engine(pg_url)
    downgrade(engine, "0005")
    try:
        yield engine
    finally:
        # Back to an empty partitioned ledger for the session's other tests, whatever happened.
        with engine.begin() as conn:
            for event in ("insert", "update", "delete"):
                conn.execute(
                    text(f"DROP FUNCTION IF EXISTS ledger_partition_mirror_{event}() CASCADE")
                )
            conn.execute(text(f"DROP TABLE IF EXISTS {repartition.OLD}"))
            conn.execute(text(f"DROP TABLE IF EXISTS {repartition.NEW} CASCADE"))
            conn.execute(text("DELETE FROM token_usage"))
        downgrade(engine, "0005")
        upgrade(engine)
        engine.dispose()


def _stored(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(select(token_usage.c.event_id, token_usage.c.id))
        return {r[0]: r[1] for r in rows}


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_partition_copies_everything_while_a_writer_process_keeps_recording(
    plain_ledger: Engine, pg_url: str, tmp_path: Path
) -> None:
    # Existing rows across three months (written at revision 0005, where the
    # writer refuses to run), then the upgrade leaves the table plain.
    days = [dt.datetime(2024, m, d, tzinfo=dt.UTC) for m in (1, 2, 3) for d in range(1, 11)]
    seed = [usage(day) for day in days]
    with plain_ledger.begin() as conn:
        conn.execute(
            insert(token_usage),
            [
                {
                    "event_id": e.event_id,
                    "call_id": e.call_id,
                    "attempt": e.attempt,
                    "started_at": e.started_at,
                    "requested_provider": e.requested_provider,
                    "requested_model": e.requested_model,
                    "provider": e.provider,
                    "status": e.status,
                    "cost_usd": e.cost_usd,
                }
                for e in seed
            ],
        )
    upgrade(plain_ledger)
    with plain_ledger.connect() as conn:
        assert not partitions.is_partitioned(conn.connection.driver_connection)
    before = _stored(plain_ledger)
    assert len(before) == 30

    progress, stop = tmp_path / "progress", tmp_path / "stop"
    progress.write_bytes(b"\0" * 8)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, str(CHILD), pg_url, str(tmp_path / "j"), str(progress), str(stop)],
        env=env,
    )
    with open(progress, "r+b") as f:
        done = mmap.mmap(f.fileno(), 8)

    def stored() -> int:
        return int(struct.unpack("<q", done[:8])[0])

    def more_written(n: int) -> None:
        target = stored() + n
        _wait_for(lambda: stored() >= target or child.poll() is not None, "the child's rows")
        assert child.poll() is None, "the writer process ended early"

    copying: list[int] = []

    def while_copying(low: int, high: int) -> None:
        # The first batch is copied: let the writer commit more rows before the
        # next, so writes certainly land while the copy runs.
        if not copying:
            more_written(30)
        copying.append(low)

    try:
        more_written(30)
        result = repartition.partition(
            plain_ledger, dt.datetime.now(dt.UTC), batch=5, progress=while_copying
        )
        more_written(30)  # and after the swap, into the partitioned table
        stop.touch()
        assert child.wait(timeout=300) == 0
    finally:
        if child.poll() is None:
            child.kill()
    count = stored()
    assert not result.already
    assert len(copying) >= 2
    with plain_ledger.connect() as conn:
        pg = conn.connection.driver_connection
        assert partitions.is_partitioned(pg)
        assert {(2024, 1), (2024, 2), (2024, 3)} <= partitions.months(pg)
    after = _stored(plain_ledger)
    # Every row kept its id, and every event the child recorded is there once.
    assert {k: after[k] for k in before} == before
    assert set(after) == set(before) | {event_id(i) for i in range(count)}
    with plain_ledger.connect() as conn:
        total = conn.execute(text("SELECT count(*) FROM token_usage")).scalar_one()
    assert total == count + 30
    names = set(inspect(plain_ledger).get_table_names())
    assert repartition.OLD in names and repartition.NEW not in names
    # New rows keep coming from the same sequence, above every old id.
    with Ledger(pg_url, journal_dir=tmp_path / "after") as led:
        new = led.record(usage(dt.datetime.now(dt.UTC)))
        assert led.flush(60)
    assert _stored(plain_ledger)[new] > max(after.values())
    # Run again: nothing to do.
    assert repartition.partition(plain_ledger, dt.datetime.now(dt.UTC)).already


def test_upgrade_of_a_ledger_with_rows_says_to_partition_and_the_command_does_it(
    plain_ledger: Engine,
    pg_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    e = usage(dt.datetime(2025, 5, 5, tzinfo=dt.UTC))
    with plain_ledger.begin() as conn:
        conn.execute(
            insert(token_usage),
            {
                "event_id": e.event_id,
                "call_id": e.call_id,
                "attempt": 1,
                "started_at": e.started_at,
                "requested_provider": "p",
                "requested_model": "m",
                "provider": "p",
                "status": "ok",
            },
        )
    monkeypatch.setenv("LEDGER_DATABASE_URL", pg_url)
    up = ledger(capsys, "db", "upgrade")
    assert up.code == 0, up.err
    assert "not partitioned" in up.out and "`ledger db partition`" in up.out
    maintain = ledger(capsys, "db", "maintain")
    assert maintain.code == 0 and "ledger db partition" in maintain.out
    done = ledger(capsys, "db", "partition", "--batch", "1")
    assert done.code == 0, done.err
    assert "partitioned by month (1 row(s) copied" in done.out
    assert f"the old table is {repartition.OLD}" in done.out
    assert list(_stored(plain_ledger)) == [e.event_id]
    with plain_ledger.connect() as conn:
        assert partitions.is_partitioned(conn.connection.driver_connection)
        where = conn.execute(text("SELECT tableoid::regclass::text FROM token_usage")).scalar_one()
    assert where == "token_usage_p202505"


def test_the_change_log_follows_the_table_it_becomes(plain_ledger: Engine) -> None:
    # A plain ledger with a row, migrated to head (the log and its row-level insert
    # trigger on the plain table), then partitioned: the trigger moves with the table,
    # onto every partition, and the writer's batches still skip it.
    first = usage(dt.datetime(2025, 5, 5, tzinfo=dt.UTC))
    with plain_ledger.begin() as conn:
        conn.execute(insert(token_usage), {**_columns(first)})
    upgrade(plain_ledger)
    assert not repartition.partition(plain_ledger, dt.datetime.now(dt.UTC)).already
    with plain_ledger.connect() as conn:
        start = conn.execute(text("SELECT max(seq) FROM ledger_changes")).scalar_one()
    sink = PostgresSink(plain_ledger)
    try:
        days = (dt.datetime(2025, 5, 6, tzinfo=dt.UTC), dt.datetime(2025, 6, 6, tzinfo=dt.UTC))
        assert sink.insert([to_row(usage(day)) for day in days for _ in range(2)]) == 4
    finally:
        sink.close()
    by_hand = usage(dt.datetime(2025, 7, 7, tzinfo=dt.UTC))
    with plain_ledger.begin() as conn:
        conn.execute(insert(token_usage), {**_columns(by_hand)})
    with plain_ledger.connect() as conn:
        entries = conn.execute(
            text("SELECT row_id, last_id FROM ledger_changes WHERE seq > :s ORDER BY seq"),
            {"s": start},
        ).all()
        ids = dict(conn.execute(select(token_usage.c.event_id, token_usage.c.id)).all())
    ids.pop(first.event_id)
    batch = sorted(ids.pop(e) for e in list(ids) if e != by_hand.event_id)
    assert entries == [(batch[0], batch[-1]), (ids[by_hand.event_id], None)]


def _columns(e: UsageEvent) -> dict[str, object]:
    return {
        "event_id": e.event_id,
        "call_id": e.call_id,
        "attempt": 1,
        "started_at": e.started_at,
        "requested_provider": "p",
        "requested_model": "m",
        "provider": "p",
        "status": "ok",
    }
