"""Shared fixtures: real SQLite files and a real PostgreSQL database per test session.

PostgreSQL tests use the server named by ``LEDGER_TEST_POSTGRES_URL``. Unset,
they skip with a one-line reason, except under ``CI=true`` where a missing or
unreachable server fails the run loudly: CI must never pass by skipping.
Each pytest session creates its own database on that server (so concurrent
runs never share rows) and drops it at the end.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from ledger.schema import metadata
from ledger.store import repartition
from ledger.store.engine import make_engine
from ledger.store.migrate import upgrade
from tests.analytics.builders import migrated_sqlite
from tests.llm_loopback import LoopbackLLM, Rows

# LiteLLM fetches its price map from the internet when imported unless told to use the
# copy it ships; tests never reach the internet (set before any test module imports it).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

PG_ENV = "LEDGER_TEST_POSTGRES_URL"
IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture(autouse=True)
def strict(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail loudly in tests, quietly in production: with ``LEDGER_STRICT`` set, a parsing
    or recording failure in the SDK instrumentation raises instead of being logged once.
    A test asserting the quiet degradation opts out explicitly (``strict=False`` or
    ``monkeypatch.delenv("LEDGER_STRICT")``)."""
    monkeypatch.setenv("LEDGER_STRICT", "1")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A migrated SQLite ledger in a temporary directory."""
    return migrated_sqlite(tmp_path / "ledger.db")


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A fresh, empty database on the test PostgreSQL server, for this session only."""
    raw = os.environ.get(PG_ENV)
    if not raw:
        if IN_CI:
            pytest.fail(f"CI=true but {PG_ENV} is not set: PostgreSQL tests must run in CI")
        pytest.skip(f"PostgreSQL tests need {PG_ENV} (e.g. postgresql://postgres@127.0.0.1/test)")
    admin = make_url(raw).set(drivername="postgresql")
    name = f"ledger_test_{uuid.uuid4().hex[:12]}"
    admin_dsn = admin.render_as_string(hide_password=False)
    try:
        with psycopg.connect(admin_dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        if IN_CI:
            pytest.fail(f"CI=true and PostgreSQL at {PG_ENV} is unreachable: {exc}")
        pytest.skip(f"PostgreSQL at {PG_ENV} is unreachable: {exc}")
    try:
        yield admin.set(drivername="postgresql+psycopg", database=name).render_as_string(
            hide_password=False
        )
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    """A migrated PostgreSQL ledger, emptied after the test: its tables, the change log
    and their sequences, so the next test's first sync finds no gaps it did not make."""
    engine = make_engine(pg_server_url)
    upgrade(engine)
    try:
        yield pg_server_url
    finally:
        tables = ", ".join(t.name for t in metadata.sorted_tables)  # ledger_changes included
        with engine.begin() as conn:
            # a connection a failed test left open would hold TRUNCATE's lock: error, not hang
            conn.execute(text("SET LOCAL lock_timeout = '60s'"))
            conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY"))
        engine.dispose()


@pytest.fixture
def partitioned_pg_url(pg_url: str) -> str:
    """``pg_url``, its token_usage partitioned by month whatever earlier tests left.

    A test that migrated a ledger holding rows leaves token_usage plain (migration
    0006 partitions only an empty table); ``ledger db partition`` converts it.
    """
    engine = make_engine(pg_url)
    try:
        repartition.partition(engine, dt.datetime.now(dt.UTC))
        with engine.begin() as conn:
            conn.execute(text(f"DROP TABLE IF EXISTS {repartition.OLD}"))
    finally:
        engine.dispose()
    return pg_url


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def ledger_url(request: pytest.FixtureRequest) -> str:
    """The same test on a migrated SQLite file and on PostgreSQL."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    url: str = request.getfixturevalue(name)
    return url


@pytest.fixture
def engine_for(ledger_url: str) -> Iterator[Engine]:
    engine = make_engine(ledger_url)
    yield engine
    engine.dispose()


@pytest.fixture
def server() -> Iterator[LoopbackLLM]:
    """A scripted LLM server on a loopback port (tests/llm_loopback.py)."""
    with LoopbackLLM() as srv:
        yield srv


@pytest.fixture
def rows() -> Rows:
    """A recorder keeping events in memory, validated as the ledger would."""
    return Rows()
