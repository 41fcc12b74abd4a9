"""Reading ``token_usage`` rows out of the ledger database as Arrow, through ADBC.

DuckDB's ``sqlite``/``postgres`` extensions cannot be downloaded on air-gapped
machines, and ``sqlite3`` + pyarrow is about five times slower than ADBC, so
the ledger is read with the ADBC drivers. The SELECT is compiled from
:mod:`ledger.schema`; each backend's values come out in one fixed Arrow shape
(text timestamps and decimals included) that :mod:`ledger.analytics.local`
casts into DuckDB's types, so both backends land identically.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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


# The gaps a sync probes travel as one JSON text parameter, ``[[lo, hi], …]``
# (open intervals), joined to the primary key so each costs an index lookup.
_SQLITE_RANGES: Final = (
    f"json_each(?) AS g CROSS JOIN {TABLE_NAME} AS t "  # CROSS JOIN: the ranges drive
    "WHERE t.id > json_extract(g.value, '$[0]') AND t.id < json_extract(g.value, '$[1]')"
)
_PG_RANGES: Final = (
    f"jsonb_array_elements($1::jsonb) AS g(r) JOIN {TABLE_NAME} AS t "
    "ON t.id > (g.r->>0)::bigint AND t.id < (g.r->>1)::bigint"
)


def sqlite_select(ranges: bool = False) -> str:
    """The SQLite read: a typed sentinel row, then every row above ``?`` (or in the
    ranges of a JSON parameter) in id order."""
    sentinel, columns = [], []
    for col in token_usage.columns:
        sql_type, zero = _SQLITE_CAST[column_kind(col)]
        sentinel.append(f"{'-1' if col.name == 'id' else zero} AS {_quoted(col.name)}")
        columns.append(f"CAST(t.{_quoted(col.name)} AS {sql_type})")
    where = _SQLITE_RANGES if ranges else f"{TABLE_NAME} AS t WHERE t.id > ?"
    return (
        f"SELECT {', '.join(sentinel)} UNION ALL SELECT * FROM ("  # noqa: S608
        f"SELECT {', '.join(columns)} FROM {where} ORDER BY t.id)"
    )


def postgres_select(ranges: bool = False) -> str:
    columns = [
        f"t.{_quoted(c.name)}{_PG_CAST.get(column_kind(c), '')} AS {_quoted(c.name)}"
        for c in token_usage.columns
    ]
    where = _PG_RANGES if ranges else f"{TABLE_NAME} AS t WHERE t.id > $1"
    return f"SELECT {', '.join(columns)} FROM {where} ORDER BY t.id"  # noqa: S608


def ranges_json(ranges: Sequence[tuple[int, int]]) -> str:
    return json.dumps([[int(lo), int(hi)] for lo, hi in ranges])


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
                if self.backend == "postgresql":
                    # The gap probes' row estimates are wild guesses that would
                    # trigger JIT compilation, slower than the lookups themselves.
                    cur.execute("SET jit = off")
                yield cur
        finally:
            conn.close()

    def _one(self, sql: str, parameter: object) -> int | None:
        with self._cursor() as cur:
            cur.execute(sql, parameters=(parameter,))
            (value,) = cur.fetchone()
        return None if value is None else int(value)

    def max_id(self) -> int | None:
        """The ledger's highest id (the primary key's last entry)."""
        with self._cursor() as cur:
            cur.execute(f"SELECT max(id) FROM {TABLE_NAME}")  # noqa: S608
            (value,) = cur.fetchone()
        return None if value is None else int(value)

    def count_above(self, above_id: int) -> int:
        """How many rows have ``id > above_id`` (an index range count)."""
        placeholder = "?" if self.backend == "sqlite" else "$1"
        sql = f"SELECT count(*) FROM {TABLE_NAME} WHERE id > {placeholder}"  # noqa: S608
        return self._one(sql, above_id) or 0

    def count_in(self, ranges: Sequence[tuple[int, int]]) -> int:
        """How many rows have an id inside one of the open intervals ``ranges``."""
        if not ranges:
            return 0
        join = _SQLITE_RANGES if self.backend == "sqlite" else _PG_RANGES
        return self._one(f"SELECT count(*) FROM {join}", ranges_json(ranges)) or 0  # noqa: S608

    def batches(self, above_id: int) -> Iterator[pa.RecordBatch]:
        """Every row with ``id > above_id`` in id order, as Arrow batches."""
        sql = sqlite_select() if self.backend == "sqlite" else postgres_select()
        return self._batches(sql, above_id)

    def batches_in(self, ranges: Sequence[tuple[int, int]]) -> Iterator[pa.RecordBatch]:
        """Every row inside the open intervals ``ranges``, in id order, as Arrow batches."""
        if self.backend == "sqlite":
            sql = sqlite_select(ranges=True)
        else:
            sql = postgres_select(ranges=True)
        return self._batches(sql, ranges_json(ranges))

    def _batches(self, sql: str, parameter: object) -> Iterator[pa.RecordBatch]:
        with self._cursor() as cur:
            if self.backend == "sqlite":
                cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
            cur.execute(sql, parameters=(parameter,))
            reader = cur.fetch_record_batch()
            for batch in reader:
                if batch.num_rows:
                    yield batch
