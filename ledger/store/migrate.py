"""Alembic, driven from code: upgrade, downgrade and the schema check.

Only ``ledger db upgrade`` (or ``alembic upgrade head``) migrates. The library
only *checks*: :func:`check_schema` raises :class:`SchemaOutOfDate` naming the
command that fixes it, so a process never writes into a schema it does not
understand.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import OperationalError as SAOperationalError

from ledger.errors import DatabaseUnreachable, LedgerMissing, SchemaOutOfDate
from ledger.store.engine import (
    database_url,
    display_url,
    make_engine,
    sqlite_path,
    sqlite_read_options,
)
from ledger.store.partitions import is_partition

_PACKAGE_DIR: Final = Path(__file__).resolve().parent.parent
UPGRADE_COMMAND: Final = "ledger db upgrade"


def migrations_dir() -> Path:
    """The Alembic script directory: inside the wheel, or at the repository root."""
    for candidate in (_PACKAGE_DIR / "_migrations", _PACKAGE_DIR.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError("ledger's migrations directory is missing from this installation")


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config for our scripts; ``connection`` is used as is when given."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def include_name(name: str | None, type_: str, _parents: object) -> bool:
    """Alembic's filter: the model tables, not the monthly partitions of ``token_usage``."""
    return not (type_ == "table" and name is not None and is_partition(name))


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the migrations directory has no revisions"
    return head


def current_revision(engine: Engine) -> str | None:
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except SAOperationalError as exc:
        raise DatabaseUnreachable(
            f"cannot reach the ledger database {display_url(engine.url)}: {exc.orig}",
            url=display_url(engine.url),
        ) from None


def check_schema(engine: Engine, *, where: str | None = None) -> None:
    """Raise unless the database is at the code's head revision; ``where`` names it."""
    current, head = current_revision(engine), head_revision()
    if current == head:
        return
    where = where or display_url(engine.url)
    if current is None:
        message = f"the ledger database {where} has no ledger schema yet"
    else:
        message = f"the ledger database {where} is at revision {current}, this code needs {head}"
    raise SchemaOutOfDate(
        f"{message}; run `{UPGRADE_COMMAND}`", current=current, head=head, where=where
    )


def _read_only_sqlite(path: Path) -> Engine:
    query = {**sqlite_read_options(path), "uri": "true"}
    uri = URL.create("sqlite", database=f"file:{path}", query=query)
    return create_engine(uri)


def check_ledger(url: str | URL | None = None) -> URL:
    """The one check every command (and the dashboard) runs before reading the ledger.

    Returns the resolved URL, or raises what is wrong, each naming its fix:
    :class:`LedgerMissing` when a SQLite ledger's file does not exist (checked
    before connecting, which would create it and its directories),
    :class:`DatabaseUnreachable`, or :class:`SchemaOutOfDate` when the schema is
    missing (an empty file, a fresh PostgreSQL database) or at another revision.
    Creates nothing.
    """
    resolved = database_url(url)
    path = sqlite_path(resolved)
    if path is not None and not path.is_file():
        raise LedgerMissing(
            f"there is no ledger database at {path}; create it with `{UPGRADE_COMMAND}`, "
            "or fill it with a simulated workload: `ledger demo`",
            path=str(path),
        )
    # Read-only for SQLite: the WAL pragma make_engine sets would write to an empty file.
    engine = make_engine(resolved) if path is None else _read_only_sqlite(path)
    try:
        check_schema(engine, where=display_url(resolved))
    finally:
        engine.dispose()
    return resolved


def upgrade(engine: Engine, revision: str = "head") -> None:
    with engine.begin() as conn:
        command.upgrade(alembic_config(conn), revision)


def downgrade(engine: Engine, revision: str) -> None:
    with engine.begin() as conn:
        command.downgrade(alembic_config(conn), revision)
