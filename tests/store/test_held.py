"""Events held only in memory (a full journal disk): counted where another process can
read them, reported by ``ledger db status``, and exactly those lost when the process is
killed."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from ledger.cli.db import db
from ledger.schema import token_usage
from ledger.store import held
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger, replay
from ledger.store.migrate import downgrade, upgrade

from .test_durability import no_space, padded, segments, stored_ids

CHILD = Path(__file__).with_name("held_child.py")


def db_status(url: str, journal_dir: Path) -> str:
    result = CliRunner().invoke(
        db, ["status", "--journal-dir", str(journal_dir)], env={"LEDGER_DATABASE_URL": url}
    )
    # 0 when the schema is current, 1 when it is not (some tests downgrade it on purpose)
    assert result.exit_code in (0, 1) and isinstance(result.exception, SystemExit | None), (
        result.output
    )
    return result.output


def test_the_count_follows_the_events_held_in_memory(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(sqlite_url)
    downgrade(engine, "base")  # the database is not writing
    journal_dir = tmp_path / "j"
    led = Ledger(sqlite_url, journal_dir=journal_dir, segment_bytes=8_192, flush_interval_s=0.01)
    assert "no event held only in memory" in db_status(sqlite_url, journal_dir)
    monkeypatch.setattr(os, "posix_fallocate", no_space)
    recorded = [led.record(padded(1)) for _ in range(40)]
    journaled = sum(p.read_text().count("\n") - 1 for p in segments(journal_dir))
    assert led.held_in_memory == 40 - journaled > 0
    (status,) = held.read_all(journal_dir)
    assert (status.pid, status.held_in_memory, status.alive) == (os.getpid(), 40 - journaled, True)
    out = db_status(sqlite_url, journal_dir)
    assert f"{40 - journaled} event(s) held only in memory by running process {os.getpid()}" in out
    assert "killing the process loses them" in out
    upgrade(engine)  # the database takes them: nothing is at risk any more
    assert led.flush(timeout=20)
    assert led.held_in_memory == 0 and next(held.read_all(journal_dir)).held_in_memory == 0
    monkeypatch.undo()
    led.close()
    engine.dispose()
    assert sorted(stored_ids(sqlite_url)) == sorted(recorded)
    assert list(held.read_all(journal_dir)) == [], "close() deletes the status file"


def test_when_the_journal_is_writable_again_held_events_are_journaled(
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = make_engine(sqlite_url)
    downgrade(engine, "base")
    journal_dir = tmp_path / "j"
    # The writer wakes only when 20 events wait: it takes the first 20 at once.
    led = Ledger(
        sqlite_url,
        journal_dir=journal_dir,
        segment_bytes=8_192,
        batch_size=20,
        flush_interval_s=3600,
    )
    monkeypatch.setattr(os, "posix_fallocate", no_space)
    first = [led.record(padded(1)) for _ in range(20)]
    deadline = time.monotonic() + 30
    while led._pending.unjournaled:  # the writer takes them, and retries the database
        assert time.monotonic() < deadline
        time.sleep(0.01)
    second = [led.record(padded(1)) for _ in range(20)]
    assert led.held_in_memory > 20
    monkeypatch.undo()
    with caplog.at_level(logging.WARNING, logger="ledger"):
        last = led.record(padded(1))  # opens a segment: the episode ends
    # Those the writer holds stay in memory until the database takes them; every
    # other event is in the journal now.
    on_disk = "".join(p.read_text() for p in segments(journal_dir))
    assert all(eid in on_disk for eid in [*second, last])
    in_memory = [eid for eid in first if eid not in on_disk]
    assert 0 < len(in_memory) == led.held_in_memory
    assert "20 event(s) held in memory were journaled" in caplog.text
    recorded = [*first, *second, last]
    upgrade(engine)
    assert led.flush(timeout=20)
    led.close()
    engine.dispose()
    assert sorted(stored_ids(sqlite_url)) == sorted(recorded)


@pytest.mark.timeout(120)
def test_a_kill_loses_exactly_the_events_status_reported(
    sqlite_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(sqlite_url)
    downgrade(engine, "base")  # the database is not writing: events wait in the child
    journal_dir, ready = tmp_path / "j", tmp_path / "ready"
    child = subprocess.Popen(
        [sys.executable, str(CHILD), sqlite_url, str(journal_dir), "60", str(ready)],
        cwd=Path(__file__).parents[2],
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() or not ready.read_text():
            assert child.poll() is None, "the child died"
            assert time.monotonic() < deadline, "the child did not record in time"
            time.sleep(0.05)
        recorded, held_count = map(int, ready.read_text().split())
        assert held_count > 0
        out = db_status(sqlite_url, journal_dir)
        assert f"{held_count} event(s) held only in memory by running process {child.pid}" in out
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
    out = db_status(sqlite_url, journal_dir)
    assert f"process {child.pid} ended holding {held_count} event(s) only in memory" in out
    upgrade(engine)
    with caplog.at_level(logging.ERROR, logger="ledger"):
        assert replay(sqlite_url, journal_dir=journal_dir).inserted == recorded - held_count
    with engine.connect() as conn:
        stored = conn.execute(select(func.count()).select_from(token_usage)).scalar()
    engine.dispose()
    assert stored == recorded - held_count, "every journaled event survives, only held ones go"
    assert f"process {child.pid} ended holding {held_count} event(s)" in caplog.text
    assert "no event held only in memory" in db_status(sqlite_url, journal_dir)


def test_reading_the_count_creates_nothing_and_skips_foreign_files(
    sqlite_url: str, tmp_path: Path
) -> None:
    missing = tmp_path / "no-journal-here"
    assert "no event held only in memory" in db_status(sqlite_url, missing)
    assert not missing.exists()
    journal_dir = tmp_path / "j"
    journal_dir.mkdir()
    (journal_dir / "held-1-0000.json").write_text("not a status file")
    (journal_dir / "held-2-0000.json").write_text('{"ledger_held": 99, "pid": 2}')
    assert list(held.read_all(journal_dir)) == []
    assert "no event held only in memory" in db_status(sqlite_url, journal_dir)
