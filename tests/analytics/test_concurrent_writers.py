"""The analytics copy under real concurrent PostgreSQL transactions.

Each test holds transactions open on separate connections (psycopg, through
SQLAlchemy), so ids and change-log seqs are taken in one order and committed
in another, or rolled back. After every sync, the copy must equal the ledger
(:meth:`Analytics.verify`: counts, sums per model and day, rows per session,
checked here against PostgreSQL's own figures too), every stored view must
equal the view computed from the copy's rows, and every view must equal the
one a fresh full sync gives.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest
from sqlalchemy import Connection, delete, func, insert, select, text, update
from sqlalchemy.engine import Engine

from ledger.analytics import VIEW_NAMES, Analytics
from ledger.events import UsageEvent, to_row
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from ledger.store.sink import PostgresSink, Row
from tests.analytics.builders import T0, served
from tests.analytics.test_incremental import assert_same_frames, assert_views_match_rows

pytestmark = pytest.mark.postgres

S = {"session_id": "s", "actor_id": "a"}
_DEFAULTS: dict[str, Any] = {
    "session_id": None,
    "actor_id": None,
    "session_key": None,
    "upstream": None,
    "cost_usd": None,
    "error_type": None,
    "http_status": None,
    "tags": None,
}


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    engine = make_engine(pg_url)
    yield engine
    engine.dispose()


def put(conn: Connection, rows: list[dict[str, Any]]) -> list[int]:
    """Insert rows inside ``conn``'s open transaction; the ids they took."""
    result = conn.execute(
        insert(token_usage).returning(token_usage.c.id), [{**_DEFAULTS, **r} for r in rows]
    )
    return [int(i) for i in result.scalars()]


@contextmanager
def open_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction on its own connection, committed when the block ends normally."""
    with engine.connect() as conn:
        conn.begin()
        yield conn
        conn.commit()


def commit_now(engine: Engine, rows: list[dict[str, Any]]) -> list[int]:
    with open_transaction(engine) as conn:
        return put(conn, rows)


def ledger_figures(engine: Engine) -> dict[str, Any]:
    """PostgreSQL's own figures: rows, tokens and cost, per model, and rows per session."""
    with engine.connect() as conn:
        per_model = conn.execute(
            select(
                token_usage.c.requested_model,
                func.count(),
                func.sum(token_usage.c.input_tokens),
                func.sum(token_usage.c.cost_usd),
            ).group_by(token_usage.c.requested_model)
        ).all()
        per_session = conn.execute(
            select(token_usage.c.session_id, func.count())
            .where(token_usage.c.session_id.is_not(None))
            .group_by(token_usage.c.session_id)
        ).all()
    return {
        "models": {
            m: (int(n), int(i or 0), Decimal(c) if c is not None else None)
            for m, n, i, c in per_model
        },
        "sessions": {s: int(n) for s, n in per_session},
    }


def copy_figures(analytics: Analytics) -> dict[str, Any]:
    models = analytics.sql(
        "SELECT requested_model, count(*) AS n, sum(input_tokens) AS i, sum(cost_usd) AS c "
        "FROM token_usage GROUP BY requested_model"
    )
    sessions = analytics.sql(
        "SELECT session_id, count(*) AS n FROM token_usage WHERE session_id IS NOT NULL "
        "GROUP BY session_id"
    )
    return {
        "models": {
            m: (int(n), int(i), None if c is None else Decimal(c))
            for m, n, i, c in models.itertuples(index=False)
        },
        "sessions": {s: int(n) for s, n in sessions.itertuples(index=False)},
    }


def assert_exact(analytics: Analytics, engine: Engine, tmp_path: Path) -> None:
    """The copy equals the ledger, its views its rows, and a fresh full sync's views."""
    check = analytics.verify()
    assert check.ok, check.differences
    assert copy_figures(analytics) == ledger_figures(engine)
    assert_views_match_rows(analytics)
    fresh_path = tmp_path / f"fresh-{time.monotonic_ns()}.duckdb"
    with Analytics(analytics.url, path=fresh_path) as fresh:
        for view in VIEW_NAMES:
            assert_same_frames(
                analytics.sql(f'SELECT * FROM "{view}"'), fresh.sql(f'SELECT * FROM "{view}"'), view
            )
    fresh_path.unlink()


def assert_gaps_close(analytics: Analytics) -> None:
    """Once no transaction is open, a sync closes every gap. Other sessions on the
    same server hold the xmin horizon back for a while: poll, generously."""
    deadline = time.monotonic() + 120
    while analytics.refresh().gaps_open and time.monotonic() < deadline:
        time.sleep(0.5)
    assert analytics.sql("SELECT count(*) AS n FROM ledger_gaps").n[0] == 0


def test_late_commits_into_a_session_above_and_below_its_first_id(
    engine: Engine, pg_url: str, tmp_path: Path
) -> None:
    # "below": this transaction takes the lowest id, then commits last
    below = engine.connect()
    below.begin()
    put(below, [served(0, "C", **S)])
    first = commit_now(engine, [served(1, "A", **S)])
    above = engine.connect()
    above.begin()
    put(above, [served(1.5, "B", **S)])  # an id above the session's first one
    commit_now(
        engine, [served(2, "A", **S), *(served(3 + i, "A", session_id="x") for i in range(20))]
    )
    with Analytics(pg_url, path=tmp_path / "a.duckdb") as analytics:
        assert analytics.session_stickiness().query("session_id == 's'").calls.tolist() == [2]
        above.commit()
        assert analytics.refresh().rows_added == 1
        stickiness = analytics.session_stickiness().query("session_id == 's'")
        assert (stickiness.calls.tolist(), stickiness.switches.tolist()) == ([3], [2])  # A B A
        assert_exact(analytics, engine, tmp_path)
        below.commit()
        assert analytics.refresh().rows_added == 1
        stickiness = analytics.session_stickiness().query("session_id == 's'")
        assert (stickiness.calls.tolist(), stickiness.switches.tolist()) == ([4], [3])  # C A B A
        assert analytics.sql("SELECT min(id) AS i FROM token_usage").i[0] < first[0]
        assert_exact(analytics, engine, tmp_path)
        assert analytics.refresh().up_to_date_already
    below.close()
    above.close()


def test_a_late_row_among_more_than_a_thousand_rolled_back_ids(
    engine: Engine, pg_url: str, tmp_path: Path
) -> None:
    commit_now(engine, [served(i, "A", **S) for i in range(5)])
    with Analytics(pg_url, path=tmp_path / "a.duckdb") as analytics:
        with engine.connect() as rolled:
            rolled.begin()
            put(rolled, [served(10, "X", session_id=f"r{i}") for i in range(700)])
            late = engine.connect()
            late.begin()
            (late_id,) = put(late, [served(4.5, "B", **S)])
            put(rolled, [served(10, "X", session_id=f"r{i}") for i in range(700)])
            rolled.rollback()
        commit_now(engine, [served(20 + i, "A", **S) for i in range(3)])
        first = analytics.refresh()
        assert first.rows_added == 3 and first.gaps_open >= 1  # the late row's seq is awaited
        late.commit()
        late.close()
        assert analytics.refresh().rows_added == 1
        held = analytics.sql(f"SELECT count(*) AS n FROM token_usage WHERE id = {late_id}")
        assert held.n[0] == 1  # once, not twice
        calls = analytics.sql("SELECT count(*) AS n FROM calls").n[0]
        assert calls == 9
        assert_gaps_close(analytics)
        assert_exact(analytics, engine, tmp_path)


def test_a_delete_in_the_gaps_and_a_late_commit_both_reach_the_copy(
    engine: Engine, pg_url: str, tmp_path: Path
) -> None:
    ids = commit_now(engine, [served(i, "A", **S) for i in range(6)])
    with Analytics(pg_url, path=tmp_path / "a.duckdb") as analytics:
        late = engine.connect()
        late.begin()
        put(late, [served(2.5, "B", **S)])
        commit_now(engine, [served(7, "A", **S)])
        assert analytics.refresh().gaps_open >= 1
        with engine.begin() as conn:  # one row out, one late row in: they must not cancel
            conn.execute(delete(token_usage).where(token_usage.c.id == ids[3]))
        late.commit()
        late.close()
        result = analytics.refresh()
        assert (result.rows_added, result.rows_deleted) == (1, 1)
        assert ids[3] not in set(analytics.sql("SELECT id FROM token_usage").id)
        assert_exact(analytics, engine, tmp_path)


def test_deletes_and_cost_updates_reach_the_copy(
    engine: Engine, pg_url: str, tmp_path: Path
) -> None:
    rows = [
        served(i, "AB"[i % 2], cost_usd=Decimal("0.001"), input_tokens=100, **S) for i in range(30)
    ]
    ids = commit_now(engine, rows)
    with Analytics(pg_url, path=tmp_path / "a.duckdb") as analytics:
        with engine.begin() as conn:  # repricing, and retention of the oldest rows
            conn.execute(
                update(token_usage)
                .where(token_usage.c.id.in_(ids[10:13]))
                .values(cost_usd=Decimal("0.0123456789"))
            )
            conn.execute(
                update(token_usage).where(token_usage.c.id == ids[20]).values(cost_usd=None)
            )
            conn.execute(delete(token_usage).where(token_usage.c.id.in_(ids[:4])))
        result = analytics.refresh()
        assert (result.rows_added, result.rows_updated, result.rows_deleted) == (0, 4, 4)
        cost = analytics.sql("SELECT sum(cost_usd) AS c FROM token_usage").c[0]
        assert Decimal(cost) == Decimal("0.001") * 22 + Decimal("0.0123456789") * 3
        assert_exact(analytics, engine, tmp_path)
        with engine.begin() as conn:  # the session's every row goes
            conn.execute(delete(token_usage))
        assert analytics.refresh().rows_deleted == 26
        assert analytics.session_stickiness().empty
        assert_exact(analytics, engine, tmp_path)


def _ledger_sync(pg_url: str, analytics_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LEDGER_DATABASE_URL": pg_url,
        "LEDGER_ANALYTICS_PATH": str(analytics_path),
    }
    return subprocess.run(
        [sys.executable, "-c", "from ledger.cli import main; main()", "sync", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_late_commits_deletes_and_updates_through_separate_cli_processes(
    engine: Engine, pg_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "cli.duckdb"
    ids = commit_now(engine, [served(i, "A", cost_usd=Decimal("0.002"), **S) for i in range(8)])
    late = engine.connect()
    late.begin()
    put(late, [served(0.5, "B", **S)])  # below the session's first served attempt
    commit_now(engine, [served(9, "A", **S)])
    assert _ledger_sync(pg_url, path).returncode == 0
    late.commit()
    late.close()
    with engine.begin() as conn:
        conn.execute(
            update(token_usage).where(token_usage.c.id == ids[1]).values(cost_usd=Decimal("1"))
        )
        conn.execute(delete(token_usage).where(token_usage.c.id == ids[2]))
    done = _ledger_sync(pg_url, path, "--verify")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 added, 1 updated, 1 deleted" in done.stdout
    assert "the copy matches the ledger" in done.stdout
    with Analytics(pg_url, path=path) as analytics:
        assert_exact(analytics, engine, tmp_path)
    # a copy that went wrong is reported, figure by figure, and exits 1
    with duckdb.connect(str(path)) as con:
        con.execute("DELETE FROM token_usage WHERE id = ?", [ids[4]])
        con.execute("DELETE FROM state_meta")  # so the state follows the tampered rows
    wrong = _ledger_sync(pg_url, path, "--verify")
    assert wrong.returncode == 1
    assert 'session rows ["s" / "a" / "m"]: ledger 9, copy 8' in wrong.stdout
    assert _ledger_sync(pg_url, path, "--full", "--verify").returncode == 0


def _writer(
    engine: Engine, seed: int, rounds: int, stop: threading.Event, errors: list[BaseException]
) -> None:
    rng = random.Random(seed)
    try:
        for n in range(rounds):
            if stop.is_set():
                return
            with engine.connect() as conn:
                conn.begin()
                session = f"s{rng.randrange(5)}"
                rows = [
                    served(
                        rng.uniform(0, 600),
                        rng.choice("ABC"),
                        session_id=session,
                        actor_id=f"w{seed}",
                        cost_usd=Decimal(rng.randrange(1, 1000)) / Decimal(10**6),
                        input_tokens=rng.randrange(1000),
                    )
                    for _ in range(rng.randrange(1, 40))
                ]
                put(conn, rows)
                time.sleep(rng.uniform(0, 0.03))
                if rng.random() < 0.25:
                    conn.rollback()
                else:
                    conn.commit()
            if n % 7 == 3:  # repricing and retention, also concurrent
                with engine.begin() as conn:
                    victim = (
                        conn.execute(
                            text(
                                "SELECT id FROM token_usage WHERE actor_id = :a "
                                "ORDER BY random() LIMIT 2"
                            ),
                            {"a": f"w{seed}"},
                        )
                        .scalars()
                        .all()
                    )
                    if victim:
                        conn.execute(
                            update(token_usage)
                            .where(token_usage.c.id == victim[0])
                            .values(cost_usd=Decimal(rng.randrange(1, 99)) / 100)
                        )
                        conn.execute(delete(token_usage).where(token_usage.c.id == victim[-1]))
    except BaseException as exc:  # reported by the test, not lost in a thread
        errors.append(exc)


def test_random_writers_commits_and_rollbacks_leave_the_copy_exact(
    engine: Engine, pg_url: str, tmp_path: Path
) -> None:
    seed = int(os.environ.get("LEDGER_TEST_SEED", "2026"))
    commit_now(engine, [served(0, "A", **S)])
    stop, errors = threading.Event(), []
    writers = [
        threading.Thread(target=_writer, args=(engine, seed * 10 + w, 30, stop, errors))
        for w in range(4)
    ]
    with Analytics(pg_url, path=tmp_path / "a.duckdb") as analytics:
        for thread in writers:
            thread.start()
        deadline = time.monotonic() + 120  # bounded: the writers stop, the test does not hang
        while any(t.is_alive() for t in writers) and time.monotonic() < deadline:
            analytics.refresh()
            time.sleep(0.02)
        stop.set()
        for thread in writers:
            thread.join(timeout=60)
        assert not errors, errors
        analytics.refresh()
        assert_gaps_close(analytics)
        assert analytics.refresh().up_to_date_already
        assert_exact(analytics, engine, tmp_path)


def test_a_late_commit_whose_xid_is_above_the_snapshot_xmax_is_awaited(
    engine: Engine, pg_url: str, tmp_path: Path
) -> None:
    # PostgreSQL's snapshot xmax is the latest *completed* xid + 1, not the next xid
    # to hand out: a transaction that took its xid after another's, then its seq
    # before that other's, is above xmax while its seq lies below the visible head.
    commit_now(engine, [served(0, "A", **S)])
    with (
        Analytics(pg_url, path=tmp_path / "a.duckdb") as analytics,
        engine.connect() as early,
        engine.connect() as late,
    ):
        analytics.refresh()
        early.begin()
        early.execute(text("SELECT pg_current_xact_id()"))  # its xid first, its seq last
        late.begin()
        (late_id,) = put(late, [served(1, "B", **S)])  # a higher xid, a lower seq
        put(early, [served(2, "A", **S)])
        early.commit()
        first = analytics.refresh()
        # (other databases' transactions on the server may hold more gaps open)
        assert first.rows_added == 1 and first.gaps_open >= 1
        assert analytics.refresh().gaps_open >= 1  # still awaited: its writer is running
        late.commit()
        assert analytics.refresh().rows_added == 1
        assert late_id in set(analytics.sql("SELECT id FROM token_usage").id)
        assert_gaps_close(analytics)
        assert_exact(analytics, engine, tmp_path)


def test_verify_while_a_writer_commits_finds_no_difference(
    engine: Engine, pg_url: str, tmp_path: Path
) -> None:
    # The copy is brought to the ledger and compared with it in one snapshot: rows
    # committed meanwhile are the next sync's, not differences (cron health checks
    # run exactly while agents write).
    commit_now(engine, [served(0, "A", **S)])
    stop = threading.Event()

    def write() -> None:
        n = 1
        while not stop.is_set():
            commit_now(engine, [served(n + i / 10, "AB"[i % 2], **S) for i in range(5)])
            n += 1

    writer = threading.Thread(target=write)
    with Analytics(pg_url, path=tmp_path / "a.duckdb") as analytics:
        writer.start()
        try:
            for _ in range(5):
                check = analytics.verify()
                assert check.ok, check.differences
        finally:
            stop.set()
            writer.join(timeout=60)


# The ledger's own writer (PostgresSink) logs each batch as range entries of the ids
# it reserved (ledger.store.sink); the tests above write with plain INSERTs, which
# the row trigger logs one by one.


def wire_rows(rng: random.Random, n: int, actor: str) -> list[Row]:
    """``n`` attempts as the writer receives them (wire rows), spread over ten hours."""
    return [
        to_row(
            UsageEvent(
                started_at=T0 + dt.timedelta(minutes=rng.uniform(0, 600)),
                requested_provider="openrouter",
                requested_model=rng.choice(["m", "n"]),
                provider="openrouter",
                status="ok",
                upstream=rng.choice("ABC"),
                session_id=f"s{rng.randrange(5)}",
                actor_id=actor,
                cost_usd=Decimal(rng.randrange(1, 1000)) / Decimal(10**6),
                input_tokens=rng.randrange(1000),
                latency_ms=100.0,
            )
        )
        for _ in range(n)
    ]


@contextmanager
def ids_cached_per_session(engine: Engine, cache: int) -> Iterator[None]:
    """Each session takes ids from token_usage's sequence in blocks of ``cache``: two
    writers' reserved ids then interleave, and a batch's ids come in several runs."""
    with engine.begin() as conn:
        sequence = conn.execute(text("SELECT pg_get_serial_sequence('token_usage', 'id')"))
        name = sequence.scalar_one()
        conn.execute(text(f"ALTER SEQUENCE {name} CACHE {cache}"))
    try:
        yield
    finally:
        with engine.begin() as conn:
            conn.execute(text(f"ALTER SEQUENCE {name} CACHE 1"))


def log_entries(engine: Engine, above: int) -> list[tuple[int, int | None]]:
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT row_id, last_id FROM ledger_changes WHERE seq > :s ORDER BY seq"),
            {"s": above},
        )
        return [(int(a), None if b is None else int(b)) for a, b in found]


def max_seq(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(text("SELECT coalesce(max(seq), 0) FROM ledger_changes")).scalar_one()
        )


def test_the_writers_batches_and_anyone_elses_inserts_reach_the_copy(
    engine: Engine, pg_url: str, tmp_path: Path
) -> None:
    rng = random.Random(22)
    sink = PostgresSink(engine)
    try:
        sink.insert(wire_rows(rng, 300, "w"))
        with Analytics(pg_url, path=tmp_path / "a.duckdb") as analytics:
            assert analytics.refresh().rows_total == 300
            start = max_seq(engine)
            sink.insert(wire_rows(rng, 200, "w"))
            (by_hand,) = commit_now(engine, [served(5, "B", **S)])  # a plain INSERT, no flag
            # the batch is one range entry, the plain insert one entry of its own
            entries = log_entries(engine, start)
            assert len(entries) == 2 and entries[-1] == (by_hand, None)
            assert entries[0][1] is not None and entries[0][1] - entries[0][0] == 199
            result = analytics.refresh()
            assert (result.rows_added, result.rows_total) == (201, 501)
            assert by_hand in set(analytics.sql("SELECT id FROM token_usage").id)
            assert_exact(analytics, engine, tmp_path)
    finally:
        sink.close()


def _sink_writer(engine: Engine, seed: int, batches: int, errors: list[BaseException]) -> None:
    rng = random.Random(seed)
    sink = PostgresSink(engine)
    try:
        for _ in range(batches):
            sink.insert(wire_rows(rng, rng.randrange(1, 400), f"w{seed}"))
    except BaseException as exc:  # reported by the test, not lost in a thread
        errors.append(exc)
    finally:
        sink.close()


def test_concurrent_writers_whose_reserved_ids_interleave_sync_exactly(
    engine: Engine, pg_url: str, tmp_path: Path
) -> None:
    rng = random.Random(2026)
    start = max_seq(engine)
    with (
        ids_cached_per_session(engine, 7),
        Analytics(pg_url, path=tmp_path / "a.duckdb") as analytics,
    ):
        # Two writers in turn: each batch takes the ids of its session's blocks, so
        # its runs interleave with the other writer's.
        sinks = [PostgresSink(engine) for _ in range(2)]
        try:
            for _ in range(5):
                for w, sink in enumerate(sinks):
                    sink.insert(wire_rows(rng, rng.randrange(1, 60), f"turn{w}"))
                analytics.refresh()
                assert_views_match_rows(analytics)
        finally:
            for sink in sinks:
                sink.close()
        entries = log_entries(engine, start)
        assert len(entries) > 10  # more entries than batches: the ids did interleave
        assert any(last is not None for _, last in entries)  # and runs are ranges
        # Then three at once, committing in whatever order, synced meanwhile.
        errors: list[BaseException] = []
        writers = [
            threading.Thread(target=_sink_writer, args=(engine, 100 + w, 8, errors))
            for w in range(3)
        ]
        for thread in writers:
            thread.start()
        deadline = time.monotonic() + 120
        while any(t.is_alive() for t in writers) and time.monotonic() < deadline:
            analytics.refresh()
            time.sleep(0.01)
        for thread in writers:
            thread.join(timeout=60)
        assert not errors, errors
        analytics.refresh()
        assert_gaps_close(analytics)
        assert analytics.refresh().up_to_date_already
        assert_exact(analytics, engine, tmp_path)
