"""Rows already in the ledger, read back as usage events: what ``ledger otel export`` replays.

A read of ``token_usage`` through the one table definition (SQLAlchemy Core,
bound parameters), streamed in ``id`` order so a year of history never sits
in memory. Each row becomes the event that produced it, so the exporter
builds exactly the span it built when the row was recorded.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any, Final

from sqlalchemy import Engine, select

from ledger.events import UsageEvent
from ledger.schema import EVENT_COLUMNS, token_usage

BATCH_ROWS: Final = 2_000


def event_of(row: Any) -> UsageEvent:
    """The usage event a ``token_usage`` row was recorded from."""
    values = {name: getattr(row, name) for name in EVENT_COLUMNS}
    for flag in ("response_cache_hit", "streamed", "paused"):
        values[flag] = bool(values[flag])
    return UsageEvent(**values)


def events_between(
    engine: Engine, since: dt.datetime | None, until: dt.datetime | None = None
) -> Iterator[UsageEvent]:
    """Events whose ``started_at`` is in ``[since, until)`` (None: unbounded), oldest id first."""
    query = select(*(token_usage.c[name] for name in EVENT_COLUMNS)).order_by(token_usage.c.id)
    if since is not None:
        query = query.where(token_usage.c.started_at >= since)
    if until is not None:
        query = query.where(token_usage.c.started_at < until)
    with engine.connect() as conn:
        result = conn.execution_options(yield_per=BATCH_ROWS).execute(query)
        for row in result:
            yield event_of(row)
