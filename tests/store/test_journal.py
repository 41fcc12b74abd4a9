"""Journal segments another version or a hand left replay into the current schema."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from sqlalchemy import Row, select

from ledger.events import UsageEvent, to_row
from ledger.schema import EVENT_COLUMNS, token_usage
from ledger.store.engine import make_engine
from ledger.store.ledger import replay

EVENT = UsageEvent(
    started_at=dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC),
    requested_provider="openai",
    requested_model="gpt-4o-mini",
    provider="openai",
    status="ok",
    input_tokens=1200,
    output_tokens=30,
)


def replay_segment(url: str, journal: Path, columns: list[str], row: dict[str, Any]) -> Row[Any]:
    """Replay a segment of one event, ``row``'s ``columns``, into ``url``; the stored row."""
    journal.mkdir()
    lines = [
        json.dumps({"ledger_journal": 1, "columns": columns}),
        json.dumps([row[c] for c in columns]),
        "",
    ]
    (journal / "segment-00000000000000000001-1-deadbeef.jsonl").write_text("\n".join(lines))
    assert replay(url, journal_dir=journal).inserted == 1
    assert not list(journal.glob("dead-letter-*"))
    engine = make_engine(url)
    with engine.connect() as conn:
        stored = conn.execute(select(token_usage)).one()
    engine.dispose()
    return stored


def test_a_segment_from_before_usage_reported_replays_as_reported(
    sqlite_url: str, tmp_path: Path
) -> None:
    # A process killed before migration 0002 left this segment: its header has no
    # usage_reported column. Its rows are what 0002 backfills: reported usage.
    old_columns = [c for c in EVENT_COLUMNS if c != "usage_reported"]
    row = dict(zip(EVENT_COLUMNS, to_row(EVENT), strict=True))
    stored = replay_segment(sqlite_url, tmp_path / "journal", old_columns, row)
    assert stored.event_id == EVENT.event_id
    assert stored.usage_reported is True and stored.input_tokens == 1200


def test_a_segment_edited_by_hand_replays_its_values_as_the_database_reads_them(
    ledger_url: str, tmp_path: Path
) -> None:
    # The PostgreSQL writer names each column's wire type to COPY (the Python type to_row
    # writes there): a value of another type must still reach the database as before.
    row = dict(zip(EVENT_COLUMNS, to_row(EVENT), strict=True))
    row.update(session_id=42, latency_ms=812)  # a number for a text column, an int for a float
    stored = replay_segment(ledger_url, tmp_path / "journal", list(EVENT_COLUMNS), row)
    assert (stored.event_id, stored.session_id, stored.latency_ms) == (EVENT.event_id, "42", 812.0)
