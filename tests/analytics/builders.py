"""Hand-built ledgers: rows with explicit values, inserted with SQLAlchemy Core."""

from __future__ import annotations

import datetime as dt
import functools
import shutil
import tempfile
import uuid
from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from ledger.analytics import Analytics, AnalyticsSettings
from ledger.schema import token_usage
from ledger.store.engine import make_engine
from ledger.store.migrate import upgrade

T0 = dt.datetime(2025, 3, 1, 9, 0, tzinfo=dt.UTC)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def row(minute: float, **values: Any) -> dict[str, Any]:
    """One attempt; defaults describe a served OpenRouter attempt of model ``m``."""
    base: dict[str, Any] = {
        "event_id": str(uuid.uuid4()),
        "call_id": str(uuid.uuid4()),
        "attempt": 1,
        "started_at": at(minute),
        "requested_provider": "openrouter",
        "requested_model": "m",
        "provider": "openrouter",
        "status": "ok",
        "latency_ms": 100.0,
    }
    base.update(values)
    return base


def served(minute: float, upstream: str | None, **values: Any) -> dict[str, Any]:
    return row(minute, upstream=upstream, **values)


def failed(minute: float, upstream: str | None, **values: Any) -> dict[str, Any]:
    defaults = {"error_type": "server_error", "http_status": 502, "latency_ms": 50.0}
    return row(minute, upstream=upstream, status="error", **{**defaults, **values})


def response_cache_row(minute: float, **values: Any) -> dict[str, Any]:
    return row(minute, attempt=0, response_cache_hit=True, latency_ms=1.0, **values)


def insert_rows(url: str, rows: Iterable[dict[str, Any]]) -> None:
    """Insert ``rows``; every row gets every column so one executemany fits all."""
    rows = list(rows)
    keys = {k for r in rows for k in r}
    defaults = {
        "session_id": None,
        "actor_id": None,
        "session_key": None,
        "upstream": None,
        "cost_usd": None,
        "error_type": None,
        "http_status": None,
        "attempt": 1,
        "response_cache_hit": False,
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "tags": None,
        "usage_reported": True,
    }
    full = [{**dict.fromkeys(keys), **defaults, **r} for r in rows]
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(insert(token_usage), full)
    finally:
        engine.dispose()


def open_analytics(url: str, tmp_path: Path, **settings: float) -> Analytics:
    return Analytics(
        url,
        path=tmp_path / "analytics.duckdb",
        settings=AnalyticsSettings(**settings) if settings else None,
    )


def edit_copy(analytics: Analytics, statement: str) -> None:
    """Change the DuckDB copy behind the API's back, as ``duckdb FILE`` could.

    ``Analytics.sql`` only reads, so this goes to the object's own connection.
    """
    analytics._con.execute(statement)


def money(text: str) -> Decimal:
    return Decimal(text)


def migrated_sqlite(path: Path) -> str:
    """The URL of a migrated SQLite ledger at ``path`` (the ``sqlite_url`` fixture's, for
    a ledger elsewhere: a second one, or one a module-scoped fixture builds).

    A copy of one file the real migrations built in this process: running them for
    every test cost the suite about half a minute. (The migrations' own tests run them.)
    """
    shutil.copyfile(_migrated_template(), path)
    return f"sqlite:///{path}"


_TEMPLATE_DIR = tempfile.TemporaryDirectory(prefix="ledger-migrated-")


@functools.cache
def _migrated_template() -> Path:
    path = Path(_TEMPLATE_DIR.name) / "ledger.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()  # the last connection closes: the WAL is folded into the file
    return path
