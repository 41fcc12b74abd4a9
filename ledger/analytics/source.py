"""Reading ``token_usage`` rows out of the ledger database as Arrow, through ADBC.

DuckDB's ``sqlite``/``postgres`` extensions cannot be downloaded on air-gapped
machines, and ``sqlite3`` + pyarrow is about five times slower than ADBC, so
the ledger is read with the ADBC drivers. The SELECT is compiled from
:mod:`ledger.schema`; each backend's values come out in one fixed Arrow shape
(text timestamps and decimals included) that :mod:`ledger.analytics.local`
casts into DuckDB's types, so both backends land identically.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import adbc_driver_postgresql.dbapi
import adbc_driver_sqlite.dbapi
import pyarrow as pa
from sqlalchemy import JSON, Boolean, DateTime, Float, Integer, Numeric
from sqlalchemy.engine import URL

from ledger.errors import ConfigurationError, DatabaseUnreachable
from ledger.schema import TABLE_NAME, token_usage
from ledger.store.engine import display_url, sqlite_path

#: Rows per Arrow batch asked of the drivers: big enough to amortise the calls.
BATCH_ROWS: Final = 65_536


@dataclass(frozen=True, slots=True)
class SourceState:
    """What the ledger holds above a given id: the cheap check before a sync."""

    max_id: int | None
    rows_above: int


def column_kind(column: Any) -> str:
    """The portable kind of a schema column: int, bool, float, decimal, timestamp, json or text."""
    col_type = column.type
    col_type = getattr(col_type, "impl", col_type)  # our TypeDecorators wrap a stock type
    # Order matters: Boolean and Float are subclasses of the types checked after them.
    for kind, sa_type in (
        ("bool", Boolean),
        ("int", Integer),
        ("float", Float),
        ("decimal", Numeric),
        ("timestamp", DateTime),
        ("json", JSON),
    ):
        if isinstance(col_type, sa_type):
            return kind
    return "text"


# SQLite keeps each value's own storage class, and the ADBC SQLite driver fixes
# a column's Arrow type from the first values it sees: a NULL-only first batch
# followed by a REAL fails the read. Casting every column to one storage class
# and leading with a typed sentinel row (id -1, dropped on load) pins the types.
_SQLITE_CAST: Final = {
    "int": ("INTEGER", "0"),
    "bool": ("INTEGER", "0"),
    "float": ("REAL", "0.0"),
    "decimal": ("REAL", "0.0"),
    "timestamp": ("TEXT", "''"),
    "json": ("TEXT", "''"),
    "text": ("TEXT", "''"),
}
# PostgreSQL's numeric and json arrive as Arrow extension types; as text they
# are exact and plain.
_PG_CAST: Final = {"decimal": "::text", "json": "::text"}


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sqlite_select() -> str:
    """The SQLite read: a typed sentinel row, then every row above ``?`` in id order."""
    sentinel, columns = [], []
    for col in token_usage.columns:
        sql_type, zero = _SQLITE_CAST[column_kind(col)]
        sentinel.append(f"{'-1' if col.name == 'id' else zero} AS {_quoted(col.name)}")
        columns.append(f"CAST({_quoted(col.name)} AS {sql_type})")
    return (
        f"SELECT {', '.join(sentinel)} UNION ALL SELECT * FROM ("  # noqa: S608
        f"SELECT {', '.join(columns)} FROM {TABLE_NAME} WHERE id > ? ORDER BY id)"
    )


def postgres_select() -> str:
    columns = [f"{_quoted(c.name)}{_PG_CAST.get(column_kind(c), '')}" for c in token_usage.columns]
    return f"SELECT {', '.join(columns)} FROM {TABLE_NAME} WHERE id > $1 ORDER BY id"  # noqa: S608


class LedgerSource:
    """An ADBC connection to one ledger database, read-only in intent."""

    def __init__(self, url: URL) -> None:
        self.url = url
        self.backend = url.get_backend_name()
        if self.backend == "sqlite":
            path = sqlite_path(url)
            if path is None:
                raise ConfigurationError(
                    "analytics need a SQLite ledger *file*; an in-memory database "
                    "cannot be read from another connection"
                )
            self._uri = f"file:{path}?mode=ro"
        elif self.backend == "postgresql":
            self._uri = url.set(drivername="postgresql").render_as_string(hide_password=False)
        else:  # database_url() already refuses these; keep the message precise anyway
            raise ConfigurationError(f"unsupported ledger backend {self.backend!r}")

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        try:
            if self.backend == "sqlite":
                conn: Any = adbc_driver_sqlite.dbapi.connect(self._uri)
            else:
                conn = adbc_driver_postgresql.dbapi.connect(self._uri)
        except Exception as exc:  # ADBC raises its own DBAPI errors per driver
            raise DatabaseUnreachable(
                f"cannot read the ledger database {display_url(self.url)}: {exc}",
                url=display_url(self.url),
            ) from None
        try:
            with conn.cursor() as cur:
                yield cur
        finally:
            conn.close()

    def state(self, above_id: int) -> SourceState:
        """The ledger's max id and how many rows sit above ``above_id`` (index-only)."""
        placeholder = "?" if self.backend == "sqlite" else "$1"
        sql = f"SELECT max(id), count(*) FROM {TABLE_NAME} WHERE id > {placeholder}"  # noqa: S608
        with self._cursor() as cur:
            cur.execute(f"SELECT max(id) FROM {TABLE_NAME}")  # noqa: S608
            (max_id,) = cur.fetchone()
            cur.execute(sql, parameters=(above_id,))
            _, rows_above = cur.fetchone()
        return SourceState(None if max_id is None else int(max_id), int(rows_above))

    def batches(self, above_id: int) -> Iterator[pa.RecordBatch]:
        """Every row with ``id > above_id`` in id order, as Arrow batches."""
        sql = sqlite_select() if self.backend == "sqlite" else postgres_select()
        with self._cursor() as cur:
            if self.backend == "sqlite":
                cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
            cur.execute(sql, parameters=(above_id,))
            reader = cur.fetch_record_batch()
            for batch in reader:
                if batch.num_rows:
                    yield batch
