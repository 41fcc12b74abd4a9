"""Reading ``token_usage`` rows out of the ledger database as Arrow, through ADBC.

DuckDB's ``sqlite``/``postgres`` extensions cannot be downloaded on air-gapped
machines, and ``sqlite3`` + pyarrow is about five times slower than ADBC, so
the ledger is read with the ADBC drivers. The SELECT is compiled from
:mod:`ledger.schema`; each backend's values come out in one fixed Arrow shape
(text timestamps and decimals included) that :mod:`ledger.analytics.copy.local`
casts into DuckDB's types, so both backends land identically.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

import adbc_driver_postgresql.dbapi
import adbc_driver_sqlite.dbapi
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import JSON, Boolean, DateTime, Float, Integer, Numeric
from sqlalchemy.engine import URL

from ledger.analytics.copy.gaps import Ranges
from ledger.errors import ConfigurationError, DatabaseUnreachable, SchemaOutOfDate
from ledger.schema import CHANGES_TABLE, TABLE_NAME, token_usage
from ledger.store.engine import (
    display_url,
    release_sqlite_files,
    sqlite_path,
    sqlite_read_options,
)
from ledger.store.migrate import UPGRADE_COMMAND, head_revision

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


# The changes a sync reads: the log above the highest seq it has seen, plus its
# open gaps (open intervals of seqs). Each gap is its own index range probe
# (LATERAL on PostgreSQL, a CROSS JOIN led by the ranges on SQLite), whatever
# their number; the integers are inlined so PostgreSQL plans with the real
# values (a generic plan for ``seq > $1`` guesses a third of the log). An entry
# names the ids row_id..coalesce(last_id, row_id) (see ledger.schema): each is
# expanded into one (seq, row_id) per id, so a seq can come more than once.
_PG_IDS: Final = "generate_series(row_id, coalesce(last_id, row_id)) AS row_id"


def _changed_pg(above_seq: int, ranges: Ranges) -> str:
    los, his = ranges.los, ranges.his  # integer lists (checked by Ranges)
    return (
        f"SELECT seq, {_PG_IDS} FROM {CHANGES_TABLE} WHERE seq > {int(above_seq)} "  # noqa: S608
        f"UNION ALL SELECT c.seq, c.row_id "
        f"FROM unnest('{{{los}}}'::bigint[], '{{{his}}}'::bigint[]) AS g(lo, hi) "
        f"CROSS JOIN LATERAL (SELECT seq, {_PG_IDS} FROM {CHANGES_TABLE} "
        f"WHERE seq > g.lo AND seq < g.hi) AS c"
    )


def _changed_sqlite(above_seq: int, ranges: Ranges) -> str:
    text = ranges_json(ranges.pairs())  # integers only: no quote can occur
    entries = (
        f"SELECT seq, row_id, last_id FROM {CHANGES_TABLE} WHERE seq > {int(above_seq)} "  # noqa: S608
        f"UNION ALL SELECT c.seq, c.row_id, c.last_id FROM json_each('{text}') AS g "
        f"CROSS JOIN {CHANGES_TABLE} AS c "  # CROSS JOIN: the ranges drive
        "WHERE c.seq > json_extract(g.value, '$[0]') AND c.seq < json_extract(g.value, '$[1]')"
    )
    # SQLite's own writer and triggers log one id per entry (last_id NULL): every
    # entry's first id is read as is, and only a range's further ids go through the
    # recursive step (sending every entry through it cost ~0.8 us each; this, 0.2).
    return (
        "WITH RECURSIVE more(seq, row_id, last_id) AS ("  # noqa: S608
        f"SELECT seq, row_id + 1, last_id FROM ({entries}) WHERE last_id > row_id "
        "UNION ALL SELECT seq, row_id + 1, last_id FROM more WHERE row_id < last_id) "
        f"SELECT seq, row_id FROM ({entries}) UNION ALL SELECT seq, row_id FROM more"
    )


def sqlite_select(where: str = "") -> str:
    """The SQLite read: a typed sentinel row, then the rows ``where`` selects, in id order."""
    sentinel, columns = [], []
    for col in token_usage.columns:
        sql_type, zero = _SQLITE_CAST[column_kind(col)]
        sentinel.append(f"{'-1' if col.name == 'id' else zero} AS {_quoted(col.name)}")
        columns.append(f"CAST(t.{_quoted(col.name)} AS {sql_type})")
    return (
        f"SELECT {', '.join(sentinel)} UNION ALL SELECT * FROM ("  # noqa: S608
        f"SELECT {', '.join(columns)} FROM {TABLE_NAME} AS t {where} ORDER BY t.id)"
    )


def postgres_select(where: str = "") -> str:
    columns = [
        f"t.{_quoted(c.name)}{_PG_CAST.get(column_kind(c), '')} AS {_quoted(c.name)}"
        for c in token_usage.columns
    ]
    return f"SELECT {', '.join(columns)} FROM {TABLE_NAME} AS t {where} ORDER BY t.id"  # noqa: S608


def ranges_json(ranges: Sequence[tuple[int, int]]) -> str:
    return json.dumps([[int(lo), int(hi)] for lo, hi in ranges])


@dataclass(frozen=True, slots=True)
class Horizon:
    """Where the ledger's change log stands in one snapshot.

    ``max_seq``: the highest change visible. ``xmin``: every transaction below
    it has ended (PostgreSQL's snapshot bound, as a 64-bit xid; 0 on SQLite,
    whose log never has gaps). See :mod:`ledger.analytics.copy.sync`.
    """

    max_seq: int
    xmin: int


_PG_HORIZON: Final = (
    f"SELECT (SELECT coalesce(max(seq), 0) FROM {CHANGES_TABLE}), "  # noqa: S608
    "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
)
_SQLITE_HORIZON: Final = f"SELECT coalesce(max(seq), 0), 0 FROM {CHANGES_TABLE}"  # noqa: S608
# The change log as this code reads it: with range entries (migration 0007).
_PG_HAS_LOG: Final = (
    "SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = "  # noqa: S608
    f"to_regclass('{CHANGES_TABLE}') AND attname = 'last_id' AND NOT attisdropped)"
)
_SQLITE_HAS_LOG: Final = (
    f"SELECT count(*) > 0 FROM pragma_table_info('{CHANGES_TABLE}') "  # noqa: S608
    "WHERE name = 'last_id'"
)


class LedgerSnapshot:
    """Reads over one consistent snapshot of the ledger (see :meth:`LedgerSource.snapshot`)."""

    def __init__(self, cur: Any, backend: str, url: URL, checked: bool = False) -> None:
        self._cur = cur
        self._backend = backend
        self._url = url
        self._checked = checked

    @property
    def backend(self) -> str:
        return self._backend

    def fetch(self, sql: str) -> list[tuple[Any, ...]]:
        """Every row of a small query, as tuples."""
        self._cur.execute(sql)
        return [tuple(r) for r in self._cur.fetchall()]

    def _one_row(self, sql: str) -> tuple[Any, ...]:
        self._cur.execute(sql)
        return tuple(self._cur.fetchone())

    def horizon(self) -> Horizon:
        """The change log's head in this snapshot; the ledger must be at migration 0007."""
        pg = self._backend == "postgresql"
        if not self._checked and not self._one_row(_PG_HAS_LOG if pg else _SQLITE_HAS_LOG)[0]:
            raise SchemaOutOfDate(
                f"the ledger database {display_url(self._url)} has no change log "
                f"({CHANGES_TABLE}, with range entries); run `{UPGRADE_COMMAND}`",
                current=None,
                head=head_revision(),
            )
        max_seq, xmin = self._one_row(_PG_HORIZON if pg else _SQLITE_HORIZON)
        return Horizon(int(max_seq), int(xmin))

    def xid_bound(self) -> int:
        """An xid above every transaction that had taken a seq when this snapshot began.

        Not the snapshot's ``xmax``: that is the latest *completed* xid + 1, and a
        running transaction can hold a higher xid with a seq below the visible
        head (it took its xid after another's, its seq before). A new xid, given
        to this read transaction after its snapshot, is above every xid handed
        out before it. It costs one xid, so it is asked only when a gap opens.
        """
        if self._backend != "postgresql":
            return 0
        return int(self._one_row("SELECT pg_current_xact_id()::text::bigint")[0])

    def row_count(self) -> int:
        return int(self._one_row(f"SELECT count(*) FROM {TABLE_NAME}")[0])  # noqa: S608

    def _int_table(self, sql: str, names: Sequence[str]) -> pa.Table:
        self._cur.execute(sql)
        table = self._cur.fetch_arrow_table()
        # An empty SQLite result has no types: pin them.
        return pa.table({n: table.column(n).cast(pa.int64()) for n in names})

    def changes(self, above_seq: int, ranges: Ranges) -> pa.Table:
        """``(seq, row_id)`` of the changes above ``above_seq`` and inside ``ranges``."""
        if self._backend == "postgresql":
            sql = _changed_pg(above_seq, ranges)
        else:
            sql = _changed_sqlite(above_seq, ranges)
        return self._int_table(sql, ("seq", "row_id"))

    def all_seqs(self) -> pa.Table:
        """Every change's ``seq`` (a rebuild records the log's gaps from them)."""
        return self._int_table(f"SELECT seq FROM {CHANGES_TABLE}", ("seq",))  # noqa: S608

    def log_is_dense(self, max_seq: int) -> bool:
        """Whether this snapshot sees every seq from 1 to ``max_seq``: a log with no gap.

        A rolled-back or still running writer leaves one (on PostgreSQL); the
        seqs are positive and unique, so a count settles it without reading them.
        """
        sql = f"SELECT count(*) FROM {CHANGES_TABLE} WHERE seq <= {int(max_seq)}"  # noqa: S608
        return int(self._one_row(sql)[0]) == max_seq

    def rows(self) -> Iterator[pa.RecordBatch]:
        """Every row, in id order, as Arrow batches."""
        return self._batches(self._select(""))

    def rows_named(self, above_seq: int, ranges: Ranges) -> Iterator[pa.RecordBatch]:
        """The current version of every row the changes of :meth:`changes` name (deleted
        rows are absent), in id order."""
        if self._backend == "postgresql":
            changed = _changed_pg(above_seq, ranges)
        else:
            changed = _changed_sqlite(above_seq, ranges)
        where = f"WHERE t.id IN (SELECT row_id FROM ({changed}) AS ch)"  # noqa: S608
        return self._batches(self._select(where))

    def rows_with_ids(self, ids: pa.Array) -> Iterator[pa.RecordBatch]:
        """The rows whose id is in ``ids`` (integers the change log named), in id order:
        one primary-key lookup each, without probing the gaps again."""
        listed = ",".join(str(int(i)) for i in pc.cast(ids, pa.int64()).to_pylist())
        if self._backend == "postgresql":
            where = f"WHERE t.id = ANY('{{{listed}}}'::bigint[])"
        else:
            where = f"WHERE t.id IN (SELECT value FROM json_each('[{listed}]'))"  # noqa: S608
        return self._batches(self._select(where))

    def _select(self, where: str) -> str:
        return sqlite_select(where) if self._backend == "sqlite" else postgres_select(where)

    def _batches(self, sql: str) -> Iterator[pa.RecordBatch]:
        if self._backend == "sqlite":
            self._cur.adbc_statement.set_options(
                **{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)}
            )
        self._cur.execute(sql)
        for batch in self._cur.fetch_record_batch():
            if batch.num_rows:
                yield batch


class LedgerSource:
    """An ADBC connection to one ledger database, read-only in intent."""

    def __init__(self, url: URL) -> None:
        self.url = url
        self.backend = url.get_backend_name()
        self._path: Path | None = None  # a SQLite ledger's file
        if self.backend == "sqlite":
            path = self._path = sqlite_path(url)
            if path is None:
                raise ConfigurationError(
                    "analytics need a SQLite ledger *file*; an in-memory database "
                    "cannot be read from another connection"
                )
            options = sqlite_read_options(path, library="adbc")
            self._uri = f"file:{path}?{urlencode(options)}"
        elif self.backend == "postgresql":
            self._uri = url.set(drivername="postgresql").render_as_string(hide_password=False)
        else:  # database_url() already refuses these; keep the message precise anyway
            raise ConfigurationError(f"unsupported ledger backend {self.backend!r}")
        self._conn: Any = None
        self._checked = False  # whether the change log was found once (it stays)

    def _connect(self) -> Any:
        try:
            if self.backend == "sqlite":
                conn: Any = adbc_driver_sqlite.dbapi.connect(self._uri, autocommit=True)
            else:
                conn = adbc_driver_postgresql.dbapi.connect(self._uri, autocommit=True)
        except Exception as exc:  # ADBC raises its own DBAPI errors per driver
            raise DatabaseUnreachable(
                f"cannot read the ledger database {display_url(self.url)}: {exc}",
                url=display_url(self.url),
            ) from None
        if self.backend == "postgresql":
            with conn.cursor() as cur:
                # The gap probes' row estimates are wild guesses that would
                # trigger JIT compilation, slower than the lookups themselves.
                cur.execute("SET jit = off")
        return conn

    def _begin(self) -> Any:
        """A cursor on the kept connection, inside a new read transaction.

        A PostgreSQL connection is kept between syncs (connecting costs more
        than a sync with nothing new); a kept one that broke (a server
        restart) is replaced once.
        """
        begin = (
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
            if self.backend == "postgresql"
            else "BEGIN"
        )
        for attempt in (1, 2):
            fresh = self._conn is None
            if self._conn is None:
                self._conn = self._connect()
            cur = self._conn.cursor()
            try:
                cur.execute(begin)
                return cur
            except Exception as exc:  # ADBC raises its own DBAPI errors per driver
                cur.close()
                self.close()
                if fresh or attempt == 2:
                    raise DatabaseUnreachable(
                        f"cannot read the ledger database {display_url(self.url)}: {exc}",
                        url=display_url(self.url),
                    ) from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with suppress(Exception):  # closing a broken connection may fail too
                conn.close()

    @contextmanager
    def snapshot(self) -> Iterator[LedgerSnapshot]:
        """One read-only transaction: every read through it sees the same ledger.

        PostgreSQL: REPEATABLE READ, whose snapshot is taken at the first
        read; SQLite: a read transaction (WAL readers see one commit).
        """
        cur = self._begin()
        try:
            yield LedgerSnapshot(cur, self.backend, self.url, self._checked)
            self._checked = True
            cur.execute("ROLLBACK")  # read only: nothing to keep
        except BaseException:
            cur.close()
            self.close()  # its state is unknown: the next snapshot reconnects
            raise
        cur.close()
        if self.backend == "sqlite":
            # A kept ADBC SQLite connection goes on reading its first snapshot;
            # opening a file costs next to nothing anyway.
            self.close()
            if self._path is not None:
                release_sqlite_files(self._path)
