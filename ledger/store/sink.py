"""Bulk, idempotent inserts of wire rows: the writer's only contact with the database.

Why not SQLAlchemy Core's ``executemany``: its typed path runs every value
through per-column bind processors (our ``UTCDateTime`` and ``Money`` type
decorators, JSON serialisation, boolean coercion) and builds a parameter dict
per row, which costs about three quarters of the time of the insert itself.
The wire rows from :func:`ledger.events.to_row` are already in the drivers'
native form, so we compile the statement once from the table and hand the
tuples straight to the DBAPI connection that SQLAlchemy's pool gives us:

* SQLite: one ``BEGIN IMMEDIATE`` transaction per batch: an ``executemany``
  into an untyped, unindexed TEMP staging table (in memory), one
  ``INSERT … SELECT … ON CONFLICT (event_id) DO NOTHING`` into ``token_usage``,
  and the batch's ids appended to the change log (``ledger_changes``) by one
  ``INSERT … SELECT`` of the ids above the table's highest before the batch
  (the transaction holds the write lock, so they are exactly the batch's).
  SQLite triggers run per row, and the change log's insert trigger (migration
  0003) cost the writer 30-45 % of its rows/s whatever its body (a ``WHEN``
  that skips it costs the same). So the transaction drops that trigger, writes
  and logs the batch, and creates it again from its own SQL before commit:
  SQLite's DDL is transactional and it has one writer, so no other connection
  ever sees the table without it, and an insert by anyone else is logged by
  it as before (each batch bumps the schema cookie, so other connections
  re-read a schema of a few tables once). Updates and deletes keep their
  triggers. The stage's columns
  have no declared type, so its values reach ``token_usage`` untouched and take
  that table's affinities as a direct insert's would; one INSERT … SELECT also
  costs less than one statement per row.
* PostgreSQL: ``COPY`` straight into ``token_usage``, which streams the batch
  in one round trip at the server's bulk-load speed, and the writer logs the
  batch in the change log itself: one statement reserves the batch's ids from
  ``token_usage``'s sequence (``nextval`` once per row, as the column default
  would) and sets the transaction-local ``ledger.sink_logs`` so the row-level
  insert trigger (migration 0007) skips the batch; ``COPY`` writes the rows with
  those ids; one ``INSERT`` logs each run of consecutive ids as one range entry
  (``row_id``..``last_id``; one run unless another writer took ids in between),
  after the rows, so the transaction holds its xid before it takes a ``seq``
  (the analytics gap bound relies on it: ledger.analytics.copy.sync). Why not a
  trigger: an insert trigger with a transition table on a partitioned table
  makes COPY insert row by row (PostgreSQL's copyfrom.c), and one log row per
  data row costs ~1 us a row whatever writes it; the two together took 17 % of
  the writer's rows/s, the range entries about nothing
  (bench/bench_pg_changelog.py). A ledger without the range column (before
  migration 0007) or without an id sequence gets a plain COPY and its triggers.
  A batch holding an event
  stored already (a replay after a crash, ``ledger replay``) fails that COPY on
  the unique key as a whole; it is rolled back and the batch takes the
  idempotent path: ``COPY`` into a session temp table, then one
  ``INSERT … SELECT … ON CONFLICT DO NOTHING``. Replays are rare, so nearly
  every batch costs one plain COPY (bench/bench_scale.py). The conflict has no
  target because the unique key is ``event_id`` on a plain table and
  ``(event_id, started_at)`` on a partitioned one (see
  ``ledger.schema.partitioned_token_usage``); ``id`` comes from a sequence, so
  that key is the only one a row can collide on; the idempotent path, rare,
  is logged by the insert trigger, one entry per new row. On a partitioned table the
  sink first creates the partitions of the batch's months, and of this month
  and the next ones (see ledger.store.partitions).

Either way a replayed event is stored once.
"""

# SQL here is composed from ledger.schema names and module constants; values are bound.
# ruff: noqa: S608
from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import operator
from collections.abc import Sequence
from typing import Any, Final, Protocol

from psycopg import sql as pgsql
from psycopg.errors import UniqueViolation
from sqlalchemy import Boolean, Engine, Float, Integer, column, select, table, true
from sqlalchemy.dialects import postgresql, sqlite

from ledger.schema import CHANGES_TABLE, EVENT_COLUMNS, PARTITION_KEY, TABLE_NAME, token_usage
from ledger.store import partitions

Row = tuple[Any, ...]

_STAGE = "ledger_stage"
#: The change log's per-row insert trigger on SQLite (migration 0003).
_LOG_INSERT_TRIGGER = "token_usage_log_insert"
_TRIGGER_SQL = "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?"
_MAX_ID = f"SELECT coalesce(max(id), 0) FROM {TABLE_NAME}"
_LOG_ABOVE = (
    f"INSERT INTO {CHANGES_TABLE} (row_id) SELECT id FROM {TABLE_NAME} WHERE id > ? ORDER BY id"
)
_started_at = operator.itemgetter(EVENT_COLUMNS.index(PARTITION_KEY))

#: Set to ``on`` for its own transaction by the PostgreSQL writer, which logs its
#: batches itself: the insert trigger's ``WHEN`` (migration 0007) then skips them.
SINK_LOGS_SETTING: Final = "ledger.sink_logs"
# What the PostgreSQL writer needs to log its batches: an id sequence, and range entries.
_PG_SELF_LOG = (
    f"SELECT pg_get_serial_sequence('{TABLE_NAME}', 'id'), EXISTS (SELECT 1 FROM pg_attribute "
    f"WHERE attrelid = to_regclass('{CHANGES_TABLE}') AND attname = 'last_id' "
    "AND NOT attisdropped)"
)
# The batch's ids, as runs of consecutive ones (lo, hi), in one round trip; and the
# flag the insert trigger reads (a FROM item: evaluated once, before the rows).
_PG_RESERVE = (
    "SELECT min(id), max(id) FROM (SELECT id, id - row_number() OVER (ORDER BY id) AS run "
    "FROM (SELECT nextval(%s::regclass) AS id FROM generate_series(1, %s)) AS ids, "
    f"set_config('{SINK_LOGS_SETTING}', 'on', true) AS flag) AS numbered "
    "GROUP BY run ORDER BY 1"
)


def _copy_type(name: str) -> str:
    """The PostgreSQL type whose dumper writes column ``name``'s wire value for COPY."""
    kind = token_usage.c[name].type
    if isinstance(kind, Integer | Boolean):  # booleans travel as 0/1
        return "int8"
    return "float8" if isinstance(kind, Float) else "text"  # text: timestamps, money, JSON


#: The types whose dumpers write a wire row's values for COPY, in EVENT_COLUMNS order.
#: COPY's text input is parsed by the server in each column's own type; the dumpers
#: only write the Python values as text. Naming them up front spares psycopg a dumper
#: lookup per value: the writer's formatting fell from 3.5 to 2.0 us a row, time it
#: takes from record() (the two share the GIL).
COPY_TYPES: Final = tuple(_copy_type(name) for name in EVENT_COLUMNS)

_PG_LOG_RUNS = (
    f"INSERT INTO {CHANGES_TABLE} (row_id, last_id) "
    "SELECT lo, nullif(hi, lo) FROM unnest(%s::bigint[], %s::bigint[]) AS r(lo, hi)"
)


class Sink(Protocol):
    def insert(self, rows: Sequence[Row]) -> int:
        """Insert ``rows`` in one transaction; rows whose event_id exists are skipped.

        Returns how many were new (the rest were stored already).
        """

    def close(self) -> None: ...


def rejection_errors(engine: Engine) -> tuple[type[BaseException], ...]:
    """DBAPI errors that blame the rows themselves (PEP 249 ``IntegrityError``, ``DataError``).

    Only these move rows to a dead-letter file. Everything else (the server is
    down, read-only after a failover, a grant or the table is missing) is an
    outage that a retry, a restore or ``ledger db upgrade`` fixes: the rows
    wait in the journal.
    """
    dbapi = engine.dialect.dbapi
    assert dbapi is not None
    return (dbapi.IntegrityError, dbapi.DataError)


class SQLiteSink:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        stage = table(_STAGE, *(column(c) for c in EVENT_COLUMNS))
        # The WHERE resolves SQLite's parsing ambiguity of INSERT … SELECT … ON CONFLICT.
        stmt = (
            sqlite.insert(token_usage)
            .from_select(list(EVENT_COLUMNS), select(*stage.c).where(true()))
            .on_conflict_do_nothing(index_elements=["event_id"])
        )
        self._insert_sql = str(stmt.compile(dialect=engine.dialect))
        names = ", ".join(f'"{c}"' for c in EVENT_COLUMNS)
        self._create_sql = f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE} ({names})"
        marks = ", ".join("?" * len(EVENT_COLUMNS))
        self._stage_sql = f"INSERT INTO temp.{_STAGE} VALUES ({marks})"
        self._empty_sql = f"DELETE FROM temp.{_STAGE}"
        self._conn: Any = None

    def _connect(self) -> Any:
        conn = self._engine.raw_connection()
        cur = conn.cursor()
        cur.execute("PRAGMA temp_store = MEMORY")  # the stage never touches the disk
        cur.execute(self._create_sql)
        return conn

    def insert(self, rows: Sequence[Row]) -> int:
        if self._conn is None:
            self._conn = self._connect()
        try:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")  # the write lock first: no one inserts in between
            found = cur.execute(_TRIGGER_SQL, (_LOG_INSERT_TRIGGER,)).fetchone()
            trigger: str | None = found[0] if found else None
            if trigger is not None:
                (before,) = cur.execute(_MAX_ID).fetchone()
                cur.execute(f'DROP TRIGGER "{_LOG_INSERT_TRIGGER}"')
            cur.executemany(self._stage_sql, rows)
            cur.execute(self._insert_sql)
            # A skipped conflict changes nothing, so this counts the new rows.
            inserted = max(cur.rowcount, 0)
            cur.execute(self._empty_sql)
            if trigger is not None:
                cur.execute(_LOG_ABOVE, (before,))
                cur.execute(trigger)
            self._conn.commit()
        except BaseException:
            self.close()
            raise
        return int(inserted)

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                conn.rollback()
            finally:
                conn.close()


class PostgresSink:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
        stage = table(_STAGE, *(column(c) for c in EVENT_COLUMNS))
        stmt = (
            postgresql.insert(token_usage)
            .from_select(list(EVENT_COLUMNS), select(*stage.c))
            .on_conflict_do_nothing()
        )
        self._insert_sql = str(stmt.compile(dialect=dialect))
        names = pgsql.SQL(", ").join(map(pgsql.Identifier, EVENT_COLUMNS))
        stage_id, table_id = pgsql.Identifier(_STAGE), pgsql.Identifier(TABLE_NAME)
        self._create_sql = pgsql.SQL(
            "CREATE TEMP TABLE IF NOT EXISTS {} ON COMMIT DELETE ROWS AS "
            "SELECT {} FROM {} WITH NO DATA"
        ).format(stage_id, names, table_id)
        self._copy_sql = pgsql.SQL("COPY {} ({}) FROM STDIN").format(stage_id, names)
        self._direct_sql = pgsql.SQL("COPY {} ({}) FROM STDIN").format(table_id, names)
        with_id = pgsql.SQL(", ").join(map(pgsql.Identifier, ("id", *EVENT_COLUMNS)))
        self._with_ids_sql = pgsql.SQL("COPY {} ({}) FROM STDIN").format(table_id, with_id)
        self._conn: Any = None
        #: token_usage's id sequence when the writer logs its own batches (else None).
        self._sequence: str | None = None
        #: Months with a partition, or None when the table is not partitioned.
        self._months: set[partitions.Month] | None = None

    def _connect(self) -> Any:
        raw = self._engine.raw_connection()
        conn: Any = raw.driver_connection
        # Wire rows carry naive-UTC timestamps; read them as UTC.
        conn.execute("SET TIME ZONE 'UTC'")
        conn.execute(self._create_sql)
        self._months = partitions.months(conn) if partitions.is_partitioned(conn) else None
        sequence, ranges = conn.execute(_PG_SELF_LOG).fetchone()
        self._sequence = sequence if sequence is not None and ranges else None
        conn.commit()
        return raw

    def _ensure_partitions(self, conn: Any, rows: Sequence[Row]) -> None:
        # A stale list only costs a row in the default partition, which
        # `ledger db maintain` moves out; a missing month would cost a full
        # batch in the default, so the batch's months are checked every time.
        if self._months is None:
            return
        # The months from the batch's first to its last (the wire text sorts in time
        # order): two passes in C. Parsing each row's month would cost the writer's
        # thread (which shares the GIL with record()) ~0.3 us a row, collecting the
        # distinct ones ~0.15. A month between them without a row costs an empty table.
        started = list(map(_started_at, rows))
        first, last = min(started), max(started)
        wanted = set(
            partitions.months_between(
                partitions.month_of_wire(first), partitions.month_of_wire(last)
            )
        )
        wanted.update(partitions.ahead(dt.datetime.now(dt.UTC)))
        if wanted <= self._months:
            return
        partitions.ensure_months(conn, wanted - self._months)
        self._months = partitions.months(conn)

    def insert(self, rows: Sequence[Row]) -> int:
        if self._conn is None:
            self._conn = self._connect()
        conn = self._conn.driver_connection
        try:
            self._ensure_partitions(conn, rows)
            try:
                inserted = self._write(conn, rows, COPY_TYPES)
            except TypeError:
                # A value not of its column's wire type, which to_row never writes: a
                # journal edited by hand. Untyped, psycopg dumps it as its own type and
                # the server takes or refuses it (a refusal goes to a dead letter).
                conn.rollback()
                inserted = self._write(conn, rows, None)
            conn.commit()
        except BaseException:
            self.close()
            raise
        return inserted

    def _write(self, conn: Any, rows: Sequence[Row], types: tuple[str, ...] | None) -> int:
        try:
            if self._sequence is None:
                return self._copy(conn, self._direct_sql, rows, types)
            return self._copy_logged(conn, self._sequence, rows, types)
        except UniqueViolation:
            conn.rollback()  # some were stored already: the idempotent path
            with conn.cursor() as cur:
                self._copy(conn, self._copy_sql, rows, types)
                cur.execute(self._insert_sql)
                return max(int(cur.rowcount), 0)  # skipped conflicts are not counted

    def _copy_logged(
        self, conn: Any, sequence: str, rows: Sequence[Row], types: tuple[str, ...] | None
    ) -> int:
        """COPY ``rows`` under ids reserved for them, and log them as range entries."""
        runs = conn.execute(_PG_RESERVE, (sequence, len(rows))).fetchall()
        ids = itertools.chain.from_iterable(range(lo, hi + 1) for lo, hi in runs)
        with conn.cursor() as cur, cur.copy(self._with_ids_sql) as copy:
            if types is not None:
                copy.set_types(("int8", *types))
            for row_id, row in zip(ids, rows, strict=True):
                copy.write_row((row_id,) + row)  # noqa: RUF005 (half the cost of unpacking)
        conn.execute(_PG_LOG_RUNS, ([lo for lo, _ in runs], [hi for _, hi in runs]))
        return len(rows)

    @staticmethod
    def _copy(
        conn: Any, statement: pgsql.Composable, rows: Sequence[Row], types: tuple[str, ...] | None
    ) -> int:
        with conn.cursor() as cur, cur.copy(statement) as copy:
            if types is not None:
                copy.set_types(types)
            for row in rows:
                copy.write_row(row)
        return len(rows)

    def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            # Drop it: after an error its session state is unknown.
            with contextlib.suppress(Exception):
                conn.invalidate()


def make_sink(engine: Engine) -> Sink:
    if engine.dialect.name == "sqlite":
        return SQLiteSink(engine)
    if engine.dialect.name == "postgresql":
        return PostgresSink(engine)
    raise ValueError(f"no sink for database dialect {engine.dialect.name!r}")
