"""The local DuckDB file: its tables, its settings and opening it safely.

The file holds a copy of ``token_usage`` with portable types (TIMESTAMPTZ in
UTC, DECIMAL(20,10), BOOLEAN, JSON: the same for a SQLite or a PostgreSQL
ledger), the ``ledger_settings`` table and ``ledger_setting()`` macro the views
read, the sync's bookkeeping (``ledger_sync``, ``ledger_cursor`` and
``ledger_gaps``: :mod:`ledger.analytics.copy.sync`), the state tables sync keeps for the
views (:mod:`ledger.analytics.state.aggregates`), and the views themselves.

DuckDB lets one process open a file for writing, and while it does no other
process can open it at all, not even read-only. A second process that finds it
locked (a dashboard is running, say) waits a little, then works on a private
in-memory copy, or raises :class:`AnalyticsBusy` when that is not allowed.

Every connection is opened without external access: no query reads or writes a
file other than the database's own, installs or loads an extension, or attaches
another database, and DuckDB refuses to turn that back on while the connection is
open (see :mod:`ledger.analytics.read.readonly`). Sync hands DuckDB its rows as
registered Arrow data, which needs no file access; JSON and Parquet are built in.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any, Final

import duckdb
from sqlalchemy import BigInteger, SmallInteger

from ledger.analytics.copy import gaps
from ledger.analytics.copy.source import column_kind
from ledger.analytics.read import prices
from ledger.analytics.settings import AnalyticsSettings
from ledger.analytics.state import aggregates
from ledger.errors import DatabaseError
from ledger.schema import TABLE_NAME, token_usage

log = logging.getLogger(__name__)

LOCK_POLL_S: Final = 0.1
#: DuckDB's own default is 80 % of RAM; beyond this it spills to ``<file>.tmp/``.
DEFAULT_MEMORY_LIMIT: Final = "3GB"
IN_MEMORY: Final = ":memory:"
#: WAL size that triggers a checkpoint. DuckDB's 16 MB default is about one
#: 10k-row sync, whose commit then spends seconds recompressing row groups; at
#: 256 MB one sync in ~15 pays it (and a rebuild checkpoints at once).
CHECKPOINT_THRESHOLD: Final = "256MB"
#: Set on every connection: no query touches a file, an extension or another database.
NO_EXTERNAL_ACCESS: Final[dict[str, str | bool | int | float | list[str]]] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
}


class AnalyticsBusy(DatabaseError):
    """The analytics file is locked by another process and no fallback was allowed."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


def _duckdb_type(column: Any) -> str:
    kind = column_kind(column)
    if kind == "int":
        col_type = column.type
        if isinstance(col_type, BigInteger) or column.name == "id":
            return "BIGINT"
        return "SMALLINT" if isinstance(col_type, SmallInteger) else "INTEGER"
    if kind == "decimal":
        impl = getattr(column.type, "impl", column.type)
        return f"DECIMAL({impl.precision}, {impl.scale})"
    return {
        "bool": "BOOLEAN",
        "float": "DOUBLE",
        "timestamp": "TIMESTAMPTZ",
        "json": "JSON",
        "text": "VARCHAR",
    }[kind]


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# Identifiers below come from ledger.schema, never from users: composing them
# is safe, and values always travel as bound parameters.
def table_ddl(name: str = TABLE_NAME, *, temporary: bool = False) -> str:
    """``CREATE TABLE token_usage`` in DuckDB types, compiled from :mod:`ledger.schema`."""
    cols = [
        f"{_q(c.name)} {_duckdb_type(c)}{'' if c.nullable else ' NOT NULL'}"
        for c in token_usage.columns
    ]
    kind = "TEMP TABLE" if temporary else "TABLE"
    return f"CREATE {kind} IF NOT EXISTS {name} ({', '.join(cols)})"


def _cast_expr(column: Any, arrow_type: str) -> str:
    """How one incoming Arrow column becomes its DuckDB column."""
    name, target = _q(column.name), _duckdb_type(column)
    if target == "TIMESTAMPTZ" and arrow_type == "string":
        # SQLite stores naive UTC text: read it as UTC whatever the session's zone.
        return f"timezone('UTC', CAST({name} AS TIMESTAMP))"
    return f"CAST({name} AS {target})"


def insert_sql(arrow_types: dict[str, str], relation: str) -> str:
    """``INSERT`` of an Arrow relation's rows, the SQLite sentinel row (id -1) dropped.

    Sync removes every changed row's old version first, so none is held.
    """
    exprs = ", ".join(_cast_expr(c, arrow_types[c.name]) for c in token_usage.columns)
    return (
        f"INSERT INTO {TABLE_NAME} SELECT {exprs} FROM {relation} AS incoming "  # noqa: S608
        "WHERE incoming.id > 0"
    )


SUPPORT_DDL: Final = (
    "CREATE TABLE IF NOT EXISTS ledger_settings "
    "(name VARCHAR PRIMARY KEY, value DOUBLE NOT NULL, description VARCHAR)",
    "CREATE TABLE IF NOT EXISTS ledger_sync (source VARCHAR, last_id BIGINT NOT NULL, "
    "synced_at TIMESTAMPTZ, rows_total BIGINT NOT NULL)",
    # How far the ledger's change log has been read (see ledger.analytics.copy.sync).
    "CREATE TABLE IF NOT EXISTS ledger_cursor (source VARCHAR NOT NULL, max_seq BIGINT NOT NULL, "
    "gaps_closed BIGINT NOT NULL, gaps_expired BIGINT NOT NULL)",
    # The views read every threshold through this macro, so changing a row of
    # ledger_settings changes every view at once, in any DuckDB client.
    "CREATE OR REPLACE MACRO ledger_setting(setting_name) AS "
    "(SELECT value FROM ledger_settings WHERE name = setting_name)",
)


def _describe(name: str) -> str:
    """The docstring's own sentences for setting ``name`` (``name``: … up to the next one)."""
    doc = " ".join((AnalyticsSettings.__doc__ or "").split())
    found = re.search(rf"``{re.escape(name)}``: (.*?)(?= ``\w+``:|$| The ``)", doc)
    return found.group(1) if found else name


_COLUMNS: Final = (
    "SELECT column_name, data_type FROM duckdb_columns() "
    "WHERE database_name = ? AND schema_name = 'main' AND table_name = ? "
    "ORDER BY column_index"
)
_SHAPE: Final = "ledger_expected_shape"


def _reshape_copy(con: duckdb.DuckDBPyConnection) -> None:
    """Drop a ``token_usage`` copy whose columns are not the schema's (a file written
    before a migration): the next sync copies every row again, in the new shape."""
    (database,) = con.execute("SELECT current_database()").fetchall()[0]
    held = con.execute(_COLUMNS, [database, TABLE_NAME]).fetchall()
    if not held:
        return
    con.execute(table_ddl(_SHAPE, temporary=True))
    try:
        expected = con.execute(_COLUMNS, ["temp", _SHAPE]).fetchall()
    finally:
        con.execute(f"DROP TABLE temp.main.{_SHAPE}")
    if held == expected:
        return
    log.info("the analytics copy predates the ledger's schema; copying every row again")
    con.execute(f"DROP TABLE {TABLE_NAME}")
    con.execute("DELETE FROM ledger_sync")
    con.execute("DELETE FROM ledger_cursor")  # no cursor: the next sync is a rebuild
    con.execute("DELETE FROM state_meta")


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    for ddl in SUPPORT_DDL:
        con.execute(ddl)
    aggregates.ensure_tables(con)
    gaps.ensure_table(con)
    _reshape_copy(con)
    con.execute(table_ddl())
    prices.ensure_table(con)


def write_settings(
    con: duckdb.DuckDBPyConnection, settings: AnalyticsSettings | None, *, overwrite: bool
) -> None:
    """Store ``settings`` (or the defaults for any name not stored yet)."""
    values = (settings or AnalyticsSettings()).as_dict()
    verb = "INSERT OR REPLACE" if overwrite and settings is not None else "INSERT OR IGNORE"
    # One statement, not executemany: DuckDB runs each of those rows as a statement
    # of its own, which took a tenth of a second of every open.
    rows = ", ".join(["(?, ?, ?)"] * len(values))
    con.execute(
        f"{verb} INTO ledger_settings VALUES {rows}",
        [item for name, value in values.items() for item in (name, value, _describe(name))],
    )


def read_settings(con: duckdb.DuckDBPyConnection) -> AnalyticsSettings:
    rows = con.execute("SELECT name, value FROM ledger_settings").fetchall()
    return AnalyticsSettings.from_mapping({str(n): float(v) for n, v in rows})


def _is_lock_error(exc: duckdb.Error) -> bool:
    return "lock" in str(exc).lower()


def open_file(
    path: Path, *, lock_timeout: float, allow_memory: bool, memory_limit: str = DEFAULT_MEMORY_LIMIT
) -> tuple[duckdb.DuckDBPyConnection, bool]:
    """Open ``path`` for writing, waiting up to ``lock_timeout`` for another process.

    Returns the connection and whether it is an in-memory stand-in: that is
    what it gets when the lock never frees and ``allow_memory`` is set;
    otherwise :class:`AnalyticsBusy` is raised.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + lock_timeout
    while True:
        try:
            config: dict[str, str | bool | int | float | list[str]] = {
                "memory_limit": memory_limit,
                "checkpoint_threshold": CHECKPOINT_THRESHOLD,
                **NO_EXTERNAL_ACCESS,
            }
            return duckdb.connect(str(path), config=config), False
        except duckdb.IOException as exc:
            if not _is_lock_error(exc):
                raise
            if time.monotonic() >= deadline:
                if allow_memory:
                    log.warning(
                        "%s is in use by another process; working on a private in-memory copy",
                        path,
                    )
                    return duckdb.connect(IN_MEMORY, config=dict(NO_EXTERNAL_ACCESS)), True
                raise AnalyticsBusy(
                    f"the analytics file {path} is in use by another process "
                    f"(a running dashboard?): {exc}",
                    path=path,
                ) from None
            time.sleep(LOCK_POLL_S)
