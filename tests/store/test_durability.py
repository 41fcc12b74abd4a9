"""The ledger's promises: record() never blocks on the database and nothing recorded is lost."""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

from ledger.errors import ConfigurationError, JournalError
from ledger.events import UsageEvent
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from ledger.store.ledger import Ledger, replay
from ledger.store.migrate import downgrade, upgrade
from tests.tcp_relay import TcpRelay

from .record_child import event_id

CHILD = Path(__file__).with_name("record_child.py")
NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def usage(**changes: object) -> UsageEvent:
    e = UsageEvent(
        started_at=NOW,
        requested_provider="openai",
        requested_model="gpt-4o-mini",
        provider="openai",
        status="ok",
        input_tokens=10,
        output_tokens=2,
        cost_usd=Decimal("0.0000042"),
        cost_source="computed",
    )
    return e.replace(**changes)


def stored_ids(url: str) -> list[str]:
    engine = make_engine(url)
    with engine.connect() as conn:
        ids = list(conn.execute(select(token_usage.c.event_id)).scalars())
    engine.dispose()
    return ids


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("segment-*.jsonl"))


def test_recording_an_event_twice_stores_it_once(ledger_url: str, tmp_path: Path) -> None:
    e = usage()
    with Ledger(ledger_url, journal_dir=tmp_path / "j") as led:
        led.record(e)
        led.record(e)
        assert led.flush()
        led.record(e)
        assert led.flush()
    assert stored_ids(ledger_url) == [e.event_id]


def test_journal_is_trimmed_once_events_are_committed(sqlite_url: str, tmp_path: Path) -> None:
    journal_dir = tmp_path / "j"
    with Ledger(sqlite_url, journal_dir=journal_dir, segment_bytes=20_000, batch_size=50) as led:
        for _ in range(2_000):
            led.record(usage())
        assert led.flush()
        time.sleep(0.3)  # the writer deletes sealed segments after their commit
        assert len(segments(journal_dir)) == 1, "sealed segments are deleted once written"
    assert segments(journal_dir) == []
    assert len(stored_ids(sqlite_url)) == 2_000


def test_out_of_date_schema_is_refused_then_written_after_upgrade(
    sqlite_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(sqlite_url)
    downgrade(engine, "base")
    journal_dir = tmp_path / "j"
    with caplog.at_level(logging.WARNING, logger="ledger"):
        led = Ledger(sqlite_url, journal_dir=journal_dir)
        e = led.record(usage())
        assert not led.flush(timeout=0.5)
        led.close(timeout=0.1)
    assert "run `ledger db upgrade`" in caplog.text
    assert len(segments(journal_dir)) == 1, "the unwritten event stays in the journal"
    upgrade(engine)
    engine.dispose()
    with Ledger(sqlite_url, journal_dir=journal_dir) as led2:  # the next ledger replays it
        assert led2.flush()
        deadline = time.monotonic() + 5
        while stored_ids(sqlite_url) != [e] and time.monotonic() < deadline:
            time.sleep(0.05)
    assert stored_ids(sqlite_url) == [e]
    assert segments(journal_dir) == []


@pytest.mark.postgres
def test_postgres_outage_loses_nothing_and_warns_once(
    pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    real = make_url(pg_url)
    proxy = TcpRelay((real.host or "127.0.0.1", real.port or 5432))
    # Trust auth ignores the password: it is here to prove logs never show it.
    via_proxy = real.set(port=proxy.port, password="s3cr3t-pw").render_as_string(
        hide_password=False
    )
    recorded: list[str] = []
    with caplog.at_level(logging.WARNING, logger="ledger"):
        led = Ledger(via_proxy, journal_dir=tmp_path / "j", batch_size=100, flush_interval_s=0.02)
        for _ in range(300):
            recorded.append(led.record(usage()))
        assert led.flush()
        proxy.cut()  # the port now refuses connections
        started = time.perf_counter()
        for _ in range(3_000):
            recorded.append(led.record(usage()))
        elapsed = time.perf_counter() - started
        assert not led.flush(timeout=1.0)
        proxy.restore()
        assert led.flush(timeout=20)
        led.close()
    # The loop finished while the database was still cut off, so no record() waited
    # for it; the bound only catches a per-call timeout (3,000 x even 0.1 s = 300 s)
    # while leaving room for a loaded CI machine (4 s seen for what takes 0.05 s idle).
    assert elapsed < 60, "record() must not wait for an unreachable database"
    assert sorted(stored_ids(pg_url)) == sorted(recorded)
    outage_warnings = [r for r in caplog.records if "retried with backoff" in r.getMessage()]
    assert len(outage_warnings) == 1, [r.getMessage() for r in caplog.records]
    assert "s3cr3t-pw" not in caplog.text


@pytest.fixture
def poison_trigger(ledger_url: str) -> Iterator[str]:
    """Make the database itself refuse rows whose actor_id is 'poison'."""
    engine = make_engine(ledger_url)
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.execute(
                text(
                    "CREATE TRIGGER poison BEFORE INSERT ON token_usage "
                    "WHEN NEW.actor_id = 'poison' BEGIN SELECT RAISE(ABORT, 'poison row'); END"
                )
            )
        else:
            conn.execute(
                text(
                    "ALTER TABLE token_usage ADD CONSTRAINT no_poison "
                    "CHECK (actor_id IS DISTINCT FROM 'poison')"
                )
            )
    yield ledger_url
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.execute(text("DROP TRIGGER poison"))
        else:
            conn.execute(text("ALTER TABLE token_usage DROP CONSTRAINT no_poison"))
    engine.dispose()


def test_rejected_rows_go_to_a_dead_letter_file_and_the_rest_are_written(
    poison_trigger: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal_dir = tmp_path / "j"
    with (
        caplog.at_level(logging.WARNING, logger="ledger"),
        Ledger(poison_trigger, journal_dir=journal_dir) as led,
    ):
        good = [led.record(usage(actor_id=f"a{i}")) for i in range(9)]
        bad = led.record(usage(actor_id="poison"))
        assert led.flush()
    assert sorted(stored_ids(poison_trigger)) == sorted(good)
    [dead] = journal_dir.glob("dead-letter-*.jsonl")
    assert bad in dead.read_text()
    # as private as the journal segments it came from, whatever the umask
    assert dead.stat().st_mode & 0o777 == 0o600
    assert str(dead) in caplog.text and "refused 1 event" in caplog.text


def test_sigkill_while_recording_loses_nothing_after_replay(
    ledger_url: str, tmp_path: Path
) -> None:
    total = 50_000
    progress = tmp_path / "progress"
    progress.write_bytes(b"\0" * 8)
    journal_dir = tmp_path / "j"
    child = subprocess.Popen(
        [sys.executable, str(CHILD), ledger_url, str(journal_dir), str(total), str(progress)],
        env={**os.environ, "PYTHONPATH": str(CHILD.parents[2])},
    )
    deadline = time.monotonic() + 60
    while struct.unpack("<q", progress.read_bytes())[0] < 15_000:
        assert child.poll() is None and time.monotonic() < deadline, "child stopped early"
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    child.wait()
    returned = struct.unpack("<q", progress.read_bytes())[0]
    assert returned < total, "the kill must land mid-run"

    replayed = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ledger.cli import main; main()",
            "replay",
            "--journal-dir",
            str(journal_dir),
        ],
        env={**os.environ, "LEDGER_DATABASE_URL": ledger_url},
        capture_output=True,
        text=True,
        check=True,
    )
    assert re.match(r"replayed [1-9]\d* event\(s\)", replayed.stdout), replayed.stdout
    ids = stored_ids(ledger_url)
    assert len(ids) == len(set(ids)), "an event_id appears twice"
    expected = {event_id(i) for i in range(returned)}
    # Every event whose record() returned is there; at most the one in flight
    # when the signal landed is there too.
    assert expected <= set(ids)
    assert set(ids) - expected <= {event_id(returned)}
    assert segments(journal_dir) == []
    assert replay(ledger_url, journal_dir=journal_dir).events == 0


def test_two_processes_record_into_one_sqlite_file(sqlite_url: str, tmp_path: Path) -> None:
    n = 20_000
    children = []
    for k in range(2):
        progress = tmp_path / f"progress{k}"
        progress.write_bytes(b"\0" * 8)
        children.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(CHILD),
                    sqlite_url,
                    str(tmp_path / f"j{k}"),
                    str(n),
                    str(progress),
                    "200",
                    str(k * n),  # distinct ids: a child losing its rows cannot hide
                ],
                env={**os.environ, "PYTHONPATH": str(CHILD.parents[2])},
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = [(c.communicate(timeout=120)[1], c.returncode) for c in children]
    for err, code in results:
        assert code == 0, err
        assert "locked" not in err, err
    ids = stored_ids(sqlite_url)
    assert len(ids) == 2 * n and set(ids) == {event_id(i) for i in range(2 * n)}
    assert not list(tmp_path.glob("j*/dead-letter-*")), "no event may be refused"


def test_record_returns_the_event_id_and_rejects_after_close(
    sqlite_url: str, tmp_path: Path
) -> None:
    led = Ledger(sqlite_url, journal_dir=tmp_path / "j")
    e = usage(event_id=str(uuid.uuid4()))
    assert led.record(e) == e.event_id
    led.close()
    with pytest.raises(RuntimeError, match="closed"):
        led.record(usage())


def test_memory_stays_bounded_through_an_outage_and_nothing_is_lost(
    sqlite_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(sqlite_url)
    downgrade(engine, "base")  # the writer now refuses to write: an outage
    with caplog.at_level(logging.WARNING, logger="ledger"):
        led = Ledger(
            sqlite_url,
            journal_dir=tmp_path / "j",
            max_pending_rows=100,
            segment_bytes=50_000,
            flush_interval_s=0.01,
        )
        recorded = [led.record(usage()) for _ in range(1_000)]
        assert len(led._pending.rows) <= 100
        upgrade(engine)
        assert led.flush(timeout=20)
        led.close()
    engine.dispose()
    assert "kept in the journal" in caplog.text
    assert sorted(stored_ids(sqlite_url)) == sorted(recorded)
    assert segments(tmp_path / "j") == []


def test_a_forked_child_records_into_its_own_journal(sqlite_url: str, tmp_path: Path) -> None:
    journal_dir = tmp_path / "j"
    led = Ledger(sqlite_url, journal_dir=journal_dir, flush_interval_s=0.01)
    parent_before = [led.record(usage(actor_id="parent")) for _ in range(100)]
    child_ids = [str(uuid.uuid4()) for _ in range(200)]
    pid = os.fork()
    if pid == 0:  # the child: record, flush, and report through the exit status
        ok = False
        try:
            for eid in child_ids:
                led.record(usage(event_id=eid, actor_id="child"))
            ok = led.flush(timeout=20)
            led.close()
        finally:
            os._exit(0 if ok else 1)
    parent_after = [led.record(usage(actor_id="parent")) for _ in range(100)]
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child's flush did not complete"
    assert led.flush(timeout=20)
    led.close()
    assert sorted(stored_ids(sqlite_url)) == sorted(parent_before + child_ids + parent_after)
    assert segments(journal_dir) == []


def test_a_table_dropped_at_runtime_is_an_outage_not_a_dead_letter(
    ledger_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(ledger_url)
    with caplog.at_level(logging.WARNING, logger="ledger"):
        led = Ledger(ledger_url, journal_dir=tmp_path / "j", flush_interval_s=0.01)
        first = [led.record(usage()) for _ in range(10)]
        assert led.flush()
        downgrade(engine, "base")  # someone drops the table under a running writer
        later = [led.record(usage()) for _ in range(10)]
        assert not led.flush(timeout=0.5)
        upgrade(engine)
        assert led.flush(timeout=20)
        led.close()
    engine.dispose()
    assert sorted(stored_ids(ledger_url)) == sorted(later)  # the drop took `first` with it
    assert first and not list((tmp_path / "j").glob("dead-letter-*"))
    assert "no such table" in caplog.text or "does not exist" in caplog.text


def no_space(fd: int, offset: int, length: int) -> None:
    raise OSError(28, "No space left on device")


def padded(i: int) -> UsageEvent:
    """Events of two sizes: once a segment is too full for a long line, short ones still fit."""
    return usage(tags={"pad": "x" * 1500} if i % 2 else None)


def test_a_full_disk_keeps_events_in_memory_and_warns_once_per_episode(
    sqlite_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    led = Ledger(sqlite_url, journal_dir=tmp_path / "j", segment_bytes=8_192)
    monkeypatch.setattr(os, "posix_fallocate", no_space)  # every new segment now fails
    with caplog.at_level(logging.WARNING, logger="ledger"):
        recorded = [led.record(padded(i)) for i in range(500)]
        assert led.flush(timeout=20)
        assert led.held_in_memory == 0, "the database took them all"
        monkeypatch.undo()
        recorded += [led.record(padded(1)) for _ in range(10)]  # opens a new segment
        assert led.flush(timeout=20)
    led.close()
    assert sorted(stored_ids(sqlite_url)) == sorted(recorded)
    messages = [r.getMessage() for r in caplog.records]
    held = [m for m in messages if "held only in memory" in m]
    assert len(held) == 1, held
    assert "No space left" in held[0] and "lost if this process dies" in held[0]
    assert len([m for m in messages if "can be written again" in m]) == 1


def test_refuse_raises_at_the_first_event_the_journal_cannot_take(
    sqlite_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = make_engine(sqlite_url)
    downgrade(engine, "base")  # the database is not writing either: only the journal holds them
    journal_dir = tmp_path / "j"
    led = Ledger(sqlite_url, journal_dir=journal_dir, segment_bytes=8_192, on_journal_full="refuse")
    monkeypatch.setattr(os, "posix_fallocate", no_space)
    accepted: list[str] = []
    refused: list[JournalError] = []
    with caplog.at_level(logging.WARNING, logger="ledger"):
        for i in range(200):
            event = padded(i)
            try:
                accepted.append(led.record(event))
            except JournalError as exc:
                refused.append(exc)
                assert event.event_id in str(exc)
        assert accepted and refused and led.held_in_memory == 0
        # Every event record() accepted is on disk, in the journal.
        on_disk = "".join(p.read_text(errors="replace") for p in segments(journal_dir))
        assert all(eid in on_disk for eid in accepted)
        monkeypatch.undo()
        accepted.append(led.record(padded(1)))
        upgrade(engine)
        assert led.flush(timeout=20)
    led.close()
    engine.dispose()
    assert sorted(stored_ids(sqlite_url)) == sorted(accepted)
    assert isinstance(refused[0], OSError) and "No space left" in str(refused[0])
    assert "on_journal_full='refuse'" in str(refused[0])
    warnings = [r.getMessage() for r in caplog.records if "JournalError" in r.getMessage()]
    assert len(warnings) == 1 and "refuses new events" in warnings[0]
    assert len([r for r in caplog.records if "can be written again" in r.getMessage()]) == 1


def test_the_journal_full_choice_is_checked(sqlite_url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="on_journal_full='drop'"):
        Ledger(sqlite_url, journal_dir=tmp_path / "j", on_journal_full="drop")  # type: ignore[arg-type]
