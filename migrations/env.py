"""Alembic environment for the ledger.

The database comes from the connection passed in ``config.attributes`` (how
``ledger db upgrade`` and the tests call us) or else from the app's own setting,
``LEDGER_DATABASE_URL``, so the CLI and ``alembic`` always agree.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from ledger.schema import metadata
from ledger.store.engine import make_engine
from ledger.store.migrate import include_name

config = context.config
if config.config_file_name is not None and "connection" not in config.attributes:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most things: batch mode recreates the table.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=include_name,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine()
    try:
        with engine.begin() as conn:
            _run(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; connect to a database")
run_migrations_online()
