"""Where the ledger lives: URL resolution and engine construction.

``LEDGER_DATABASE_URL`` (any SQLAlchemy URL) selects the database for the
library, every command and the dashboard; unset, it is ``ledger.db`` in the
working directory. SQLite runs in WAL mode with a busy timeout so several
processes can record into one file while readers keep reading.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, Final

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ledger.errors import ConfigurationError

ENV_URL: Final = "LEDGER_DATABASE_URL"
DEFAULT_SQLITE_FILE: Final = "ledger.db"
#: How long a SQLite connection waits for another process's write lock.
SQLITE_BUSY_TIMEOUT_MS: Final = 30_000


def database_url(url: str | URL | None = None) -> URL:
    """The ledger's URL: ``url`` if given, else the environment, else the default file.

    A PostgreSQL URL without a driver gets psycopg 3, the one we depend on.
    """
    raw = url if url is not None else os.environ.get(ENV_URL) or None
    if raw is None:
        return URL.create("sqlite", database=str(Path.cwd() / DEFAULT_SQLITE_FILE))
    try:
        parsed = make_url(raw)
    except ArgumentError as exc:
        raise ConfigurationError(f"{ENV_URL} is not a valid SQLAlchemy URL: {exc}") from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise ConfigurationError(
            f"unsupported database {parsed.get_backend_name()!r}: use sqlite:/// or postgresql://"
        )
    # the drivers we install and test; another (asyncpg, psycopg2, aiosqlite) is not
    # installed, and would fail later with a traceback instead of this line
    if parsed.get_driver_name() not in ("pysqlite", "psycopg"):
        raise ConfigurationError(
            f"unsupported database driver {parsed.get_driver_name()!r} in the ledger URL: "
            f"write {parsed.get_backend_name()}:// without a driver (the ledger uses "
            "psycopg 3 for PostgreSQL and Python's sqlite3)"
        )
    return parsed


def display_url(url: URL) -> str:
    """The URL with its password hidden, for messages and logs."""
    return url.render_as_string(hide_password=True)


def sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL, or None for other backends and in-memory databases."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database)


def sqlite_read_options(path: Path, *, library: str = "sqlite3") -> dict[str, str]:
    """The URI options a reader opens the SQLite ledger at ``path`` with; none creates it.

    Python's ``sqlite3`` (``library="sqlite3"``) opens ``mode=rw`` where the
    directory is writable, though it only reads: the last connection to close a
    WAL database checkpoints it and deletes its ``-wal`` and ``-shm``, which a
    read-only connection cannot, so every read would leave them behind.

    ADBC's driver (``library="adbc"``) always opens ``mode=ro``: it links its
    own copy of SQLite, which cannot see the locks of this process's other
    connections (POSIX locks belong to the process), so closing as the "last"
    connection it deleted the WAL a ``sqlite3`` writer in the same process was
    still appending to, and those writes went into an unlinked file. Its files
    are tidied after it by :func:`release_sqlite_files`.

    Where the directory is not writable, WAL mode needs the ``-shm`` to exist
    (``mode=ro``: a writer with more rights has the file open); with none,
    nobody has it open and only ``immutable=1`` opens it, reading without
    locks (a writer starting mid-read could be misread, never harmed).
    """
    writable = os.access(path.parent, os.W_OK)
    if writable:
        return {"mode": "rw" if library == "sqlite3" else "ro"}
    if path.with_name(path.name + "-shm").exists():
        return {"mode": "ro"}
    return {"mode": "ro", "immutable": "1"}


def release_sqlite_files(path: Path) -> None:
    """Delete the ``-wal`` and ``-shm`` a read-only reader left beside the SQLite ledger at
    ``path``, unless a connection (in any process) still has the database open.

    A connection of Python's ``sqlite3`` that reads and closes does it when it is
    the last: being the library this process writes with, it sees its other
    connections, and other processes' locks (see :func:`sqlite_read_options`).
    """
    if not os.access(path.parent, os.W_OK) or not path.exists():
        return
    con = sqlite3.connect(f"file:{path}?mode=rw", uri=True, timeout=0)
    try:
        con.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # opens the WAL
    except sqlite3.Error:
        pass  # busy or odd: leaving the files is harmless, the next reader tidies
    finally:
        con.close()


def _sqlite_pragmas(dbapi_conn: sqlite3.Connection, _record: Any) -> None:
    # WAL lets readers (analytics, dashboard) run beside the writer; NORMAL
    # sync is durable across process crashes, which is the failure we guard.
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA journal_mode = WAL")
    cur.execute("PRAGMA synchronous = NORMAL")
    cur.close()


def make_engine(url: str | URL | None = None, **kwargs: Any) -> Engine:
    """An engine for the ledger database, configured for its backend."""
    resolved = database_url(url)
    if resolved.get_backend_name() == "sqlite":
        engine = create_engine(resolved, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    connect_args = kwargs.pop("connect_args", {})
    connect_args.setdefault("connect_timeout", 5)
    return create_engine(resolved, connect_args=connect_args, **kwargs)
