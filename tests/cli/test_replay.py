"""``ledger replay``: what it wrote and what the ledger held already, counted apart."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest

from ledger.events import UsageEvent, to_row
from ledger.store import journal
from ledger.store.ledger import Ledger, replay
from tests.cli.shell import ledger

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)


def usage(actor: str) -> UsageEvent:
    return UsageEvent(
        started_at=NOW,
        requested_provider="openai",
        requested_model="gpt-4o-mini",
        provider="openai",
        status="ok",
        actor_id=actor,
        input_tokens=10,
        output_tokens=2,
        cost_usd=Decimal("0.0000042"),
        cost_source="computed",
    )


def orphaned_journal(url: str, directory: Path, events: list[UsageEvent], stored: int) -> None:
    """A segment holding ``events`` that no process holds, the first ``stored`` of which
    the ledger has already (a process that died after its commit, before trimming)."""
    with Ledger(url, journal_dir=directory / "writer") as led:
        for event in events[:stored]:
            led.record(event)
        assert led.flush(timeout=60)
    segment = journal.open_segment(directory)
    for event in events:
        journal.append(segment, journal.encode_row(to_row(event)))
    segment.release(delete=False)  # unlocked and left behind: an orphan


def test_replay_counts_inserted_and_already_present_apart(
    ledger_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    directory = tmp_path / "journal"
    orphaned_journal(ledger_url, directory, [usage(f"a{i}") for i in range(5)], stored=2)
    monkeypatch.setenv("LEDGER_DATABASE_URL", ledger_url)
    result = ledger(capsys, "replay", "--journal-dir", str(directory))
    assert result.code == 0, result.err
    assert "replayed 5 event(s)" in result.out
    assert "3 inserted, 2 already present" in result.out
    # Replayed once, the segment is gone: a second replay finds nothing.
    again = replay(ledger_url, journal_dir=directory)
    assert (again.events, again.inserted, again.already_present) == (0, 0, 0)


def test_replay_of_rows_all_present_inserts_none(ledger_url: str, tmp_path: Path) -> None:
    directory = tmp_path / "journal"
    orphaned_journal(ledger_url, directory, [usage(f"a{i}") for i in range(3)], stored=3)
    result = replay(ledger_url, journal_dir=directory)
    assert (result.events, result.inserted, result.already_present) == (3, 0, 3)


def test_replay_into_a_missing_ledger_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "absent" / "ledger.db"
    monkeypatch.setenv("LEDGER_DATABASE_URL", f"sqlite:///{path}")
    result = ledger(capsys, "replay", "--journal-dir", str(tmp_path / "journal"))
    assert result.code == 2
    assert "ledger db upgrade" in result.err and "Traceback" not in result.err
    assert not (tmp_path / "absent").exists()
