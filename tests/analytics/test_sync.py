"""The local DuckDB copy: types, incremental sync, the file's views, locking and filters."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from sqlalchemy import text

from ledger.analytics import (
    Analytics,
    AnalyticsBusy,
    AnalyticsSettings,
    Filters,
    analytics_path_for,
)
from ledger.analytics.copy import bulk
from ledger.events import UsageEvent
from ledger.store.engine import database_url, make_engine
from ledger.store.ledger import Ledger
from ledger.store.migrate import upgrade
from tests.analytics.builders import T0, at, insert_rows, open_analytics, served

TAGGED = served(
    0,
    "A",
    session_id="s",
    actor_id="a",
    session_key="k",
    tags={"app": "web"},
    cost_usd=Decimal("0.0000001234"),
    input_tokens=10,
    streamed=True,
)


def test_types_are_normalised_the_same_for_both_backends(ledger_url: str, tmp_path: Path) -> None:
    insert_rows(ledger_url, [TAGGED])
    with open_analytics(ledger_url, tmp_path) as analytics:
        types = dict(
            analytics.sql(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = 'token_usage'"
            ).values.tolist()
        )
        row = analytics.sql(
            "SELECT started_at, cost_usd, streamed, paused, tags->>'app' AS app, "
            "epoch_us(started_at) AS us FROM token_usage"
        ).iloc[0]
    assert (types["started_at"], types["cost_usd"], types["streamed"], types["tags"]) == (
        "TIMESTAMP WITH TIME ZONE",
        "DECIMAL(20,10)",
        "BOOLEAN",
        "JSON",
    )
    assert row.us == int(T0.timestamp() * 1_000_000)
    assert row.cost_usd == Decimal("0.0000001234")
    assert (bool(row.streamed), bool(row.paused), row.app) == (True, False, "web")


def test_a_second_sync_reads_only_new_rows(ledger_url: str, tmp_path: Path) -> None:
    insert_rows(ledger_url, [served(i, "A") for i in range(3)])
    with open_analytics(ledger_url, tmp_path) as analytics:
        assert analytics.last_sync is not None and analytics.last_sync.rows_added == 3
        insert_rows(ledger_url, [served(10 + i, "B") for i in range(2)])
        result = analytics.refresh()
        assert (result.rows_added, result.rows_total) == (2, 5)
        assert analytics.refresh().up_to_date_already
        assert analytics.sql("SELECT count(*) AS n FROM token_usage").n[0] == 5


def test_a_row_committed_late_below_the_last_id_is_picked_up(
    ledger_url: str, tmp_path: Path
) -> None:
    # PostgreSQL hands out ids at insert time, so id 5 can commit after id 10.
    insert_rows(ledger_url, [served(0, "A", id=1), served(1, "A", id=10)])
    with open_analytics(ledger_url, tmp_path) as analytics:
        insert_rows(ledger_url, [served(2, "B", id=5)])
        assert analytics.refresh().rows_added == 1
        assert list(analytics.sql("SELECT id FROM token_usage ORDER BY id").id) == [1, 5, 10]


def _repriced_and_logged_as_one_range(url: str, lo: int, hi: int) -> None:
    """Reprice rows ``lo``..``hi`` and log it as one range entry, as the PostgreSQL
    writer logs its batches (its own row triggers held off for the change)."""
    engine = make_engine(url)
    reprice = text("UPDATE token_usage SET cost_usd = 9 WHERE id BETWEEN :lo AND :hi")
    log = text("INSERT INTO ledger_changes (row_id, last_id) VALUES (:lo, :hi)")
    try:
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(text("ALTER TABLE token_usage DISABLE TRIGGER token_usage_log_update"))
            else:
                trigger = conn.execute(
                    text("SELECT sql FROM sqlite_master WHERE name = 'token_usage_log_update'")
                ).scalar_one()
                conn.execute(text("DROP TRIGGER token_usage_log_update"))
            conn.execute(reprice, {"lo": lo, "hi": hi})
            conn.execute(log, {"lo": lo, "hi": hi})
            if engine.dialect.name == "postgresql":
                conn.execute(text("ALTER TABLE token_usage ENABLE TRIGGER token_usage_log_update"))
            else:
                conn.execute(text(trigger))
    finally:
        engine.dispose()


def test_a_range_entry_in_the_change_log_names_every_id_in_it(
    ledger_url: str, tmp_path: Path
) -> None:
    insert_rows(ledger_url, [served(i, "A", id=i, cost_usd=Decimal(1)) for i in range(1, 7)])
    with open_analytics(ledger_url, tmp_path) as analytics:
        _repriced_and_logged_as_one_range(ledger_url, 2, 4)
        result = analytics.refresh()
        assert (result.rows_added, result.rows_updated, result.rows_total) == (0, 3, 6)
        costs = analytics.sql("SELECT id, cost_usd FROM token_usage ORDER BY id")
        assert [float(c) for c in costs.cost_usd] == [1, 9, 9, 9, 1, 1]
        assert analytics.refresh().up_to_date_already


def test_the_file_holds_the_views_for_any_duckdb_client(ledger_url: str, tmp_path: Path) -> None:
    insert_rows(ledger_url, [served(0, "A", session_id="s"), served(1, "B", session_id="s")])
    open_analytics(ledger_url, tmp_path).close()
    with duckdb.connect(str(tmp_path / "analytics.duckdb"), read_only=True) as con:
        row = con.execute("SELECT switches, stickiness FROM session_stickiness").fetchone()
    assert row == (1, 0.0)


def test_a_file_filled_from_another_ledger_is_rebuilt(tmp_path: Path, sqlite_url: str) -> None:
    insert_rows(sqlite_url, [served(i, "A") for i in range(3)])
    shared = tmp_path / "shared.duckdb"
    Analytics(sqlite_url, path=shared).close()
    other = f"sqlite:///{tmp_path / 'other.db'}"
    engine = make_engine(other)
    upgrade(engine)
    engine.dispose()
    insert_rows(other, [served(0, "Z")])
    with Analytics(other, path=shared) as analytics:
        assert analytics.last_sync is not None and analytics.last_sync.rebuilt
        assert list(analytics.sql("SELECT upstream FROM token_usage").upstream) == ["Z"]


# Holds the file until its stdin closes: however slow the machine, the lock
# outlives the test (a fixed sleep could run out first on a loaded one).
HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_file_locked_by_another_process_is_handled(sqlite_url: str, tmp_path: Path) -> None:
    insert_rows(sqlite_url, [served(0, "A"), served(1, "A")])
    path = tmp_path / "busy.duckdb"
    Analytics(sqlite_url, path=path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        started = time.monotonic()
        with pytest.raises(AnalyticsBusy, match="in use by another process"):
            Analytics(sqlite_url, path=path, lock_timeout=0.3, allow_memory=False)
        assert time.monotonic() - started < 60  # gave up after its timeout, did not hang
        # The default, as the README shows it: works while a dashboard holds the file.
        with Analytics(sqlite_url, path=path, lock_timeout=0.1) as analytics:
            assert analytics.in_memory
            assert analytics.sql("SELECT count(*) AS n FROM calls").n[0] == 2
            assert len(analytics.calls()) == 2
    finally:
        holder.kill()
        holder.wait()
        for pipe in (holder.stdin, holder.stdout):
            if pipe is not None:
                pipe.close()


def test_filters_select_rows_before_the_metrics(ledger_url: str, tmp_path: Path) -> None:
    s = {"session_id": "s", "actor_id": "a"}
    insert_rows(
        ledger_url,
        [
            served(0, "A", **s),
            served(1, "B", **s),
            served(2, "B", **s),
            served(3, "B", session_key="k", **s),
            served(0, "A", session_id="t", actor_id="b"),
        ],
    )
    with open_analytics(ledger_url, tmp_path) as analytics:
        everything = analytics.session_stickiness()
        later = analytics.session_stickiness(Filters(start=at(1), end=at(3)))
        agent_b = analytics.cache_hits(Filters(actors=["b"]))
        keyed = analytics.calls(Filters(key_sent=True))
        by_agent = analytics.cache_hits_by_agent(Filters(models=["m"], providers=["openrouter"]))
    s_all = everything.set_index("session_id").loc["s"]
    assert (s_all.calls, s_all.switches) == (4, 1)
    assert list(later.session_id) == ["s"]  # t's only row is before the range
    assert (later.calls[0], later.switches[0], later.transitions[0]) == (2, 0, 1)
    assert list(agent_b.actor_id) == ["b"]
    assert len(keyed) == 1
    assert set(by_agent.actor_id) == {"a", "b"}


def test_filters_reject_naive_datetimes() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Filters(start=dt.datetime(2025, 1, 1))


def test_settings_are_validated_and_read_back(sqlite_url: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="idle_window_s"):
        AnalyticsSettings(idle_window_s=-1)
    with open_analytics(sqlite_url, tmp_path, idle_window_s=300, min_samples=7) as analytics:
        assert analytics.settings == AnalyticsSettings(idle_window_s=300, min_samples=7)
    # reopened without settings, the file keeps its own
    with open_analytics(sqlite_url, tmp_path) as analytics:
        assert analytics.settings.idle_window_s == 300


def test_default_file_sits_beside_a_sqlite_ledger_and_in_the_cache_for_a_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LEDGER_ANALYTICS_PATH", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    beside = analytics_path_for(database_url(f"sqlite:///{tmp_path / 'l.db'}"))
    assert beside == tmp_path / "l.db.analytics.duckdb"
    one = analytics_path_for(database_url("postgresql://u:secret@h/db"))
    two = analytics_path_for(database_url("postgresql://u:other@h/db"))
    assert one == two and one.parent == tmp_path / "cache" / "ledger"
    assert "secret" not in str(one)


def test_a_copy_from_before_migration_0002_is_copied_again_in_the_new_shape(
    ledger_url: str, tmp_path: Path
) -> None:
    insert_rows(ledger_url, [TAGGED])
    with open_analytics(ledger_url, tmp_path):
        pass
    # The file as a version before 0002 left it: 32-bit tokens, no usage_reported.
    with duckdb.connect(str(tmp_path / "analytics.duckdb")) as con:
        con.execute("ALTER TABLE token_usage DROP COLUMN usage_reported")
        con.execute("ALTER TABLE token_usage ALTER COLUMN input_tokens TYPE INTEGER")
    insert_rows(
        ledger_url,
        [served(1, "A", input_tokens=3_000_000_000, usage_reported=False)],
    )
    with open_analytics(ledger_url, tmp_path) as analytics:
        rows = analytics.sql(
            "SELECT input_tokens, usage_reported FROM token_usage ORDER BY id"
        ).values.tolist()
        hits = analytics.cache_hits()[["calls", "reported_calls", "input_tokens"]].sum()
    assert rows == [[10, True], [3_000_000_000, False]]
    assert hits.tolist() == [2, 1, 10]


def test_a_bulk_sync_in_many_chunks_and_steps_copies_every_row_once(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    insert_rows(sqlite_url, [served(i, "A", session_id="s", input_tokens=i) for i in range(23)])
    monkeypatch.setattr(bulk, "CHUNK_ROWS", 4)  # the sentinel row must not shift them
    monkeypatch.setattr(bulk, "CHECKPOINT_ROWS", 9)
    with Analytics(sqlite_url, path=tmp_path / "a.duckdb") as analytics:
        assert analytics.last_sync is not None
        assert analytics.last_sync.rows_added == 23
        copied = analytics.sql(
            "SELECT count(*) AS n, count(DISTINCT id) AS ids, sum(input_tokens) AS tokens "
            "FROM token_usage"
        )
    assert copied.iloc[0].tolist() == [23, 23, sum(range(23))]


def test_a_writer_and_a_reader_in_one_process_lose_no_write(
    sqlite_url: str, tmp_path: Path
) -> None:
    """A budget guard syncs the copy inside the process that records. The ADBC reader
    links its own SQLite, blind to this process's writer: opened read-write, its close
    deleted the writer's WAL, and every later write went into the unlinked file."""

    def event(n: int) -> UsageEvent:
        return UsageEvent(
            started_at=at(n),
            requested_provider="openai",
            requested_model="m",
            provider="openai",
            status="ok",
            input_tokens=n,
        )

    with (
        Ledger(sqlite_url, journal_dir=tmp_path / "journal") as ledger,
        open_analytics(sqlite_url, tmp_path) as analytics,
    ):
        for n in (1, 2, 3):
            ledger.record(event(n))
            assert ledger.flush(30)
            analytics.refresh()
            assert analytics.sql("SELECT count(*) AS n FROM token_usage").n[0] == n
    count = (
        "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute("
        "'SELECT count(*) FROM token_usage').fetchone()[0])"
    )
    after = subprocess.run(
        [sys.executable, "-c", count, str(tmp_path / "ledger.db")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert after.stdout.strip() == "3"  # every write reached the file another process reads
    assert not list(tmp_path.glob("ledger.db-*"))  # and the last to close tidied up
