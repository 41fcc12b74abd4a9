"""Monthly partitions of ``token_usage`` on PostgreSQL: naming, creation ahead, the default.

A partitioned ledger has one partition per calendar month (UTC) of
``started_at``, named ``token_usage_pYYYYMM``, plus ``token_usage_default``: a
safety net that takes a row whose month has no partition yet (a writer whose
list of partitions went stale, a hand-made insert), so no row ever fails for
want of a partition. Nothing is expected to stay there: :func:`ensure_months`
moves a month's rows out of the default into the month's own partition when
it creates it, and ``ledger db maintain`` does that for every month found there.

Partitions are plain ``CREATE TABLE`` + ``ATTACH PARTITION`` (no extension).
Creation is serialised across processes with a transaction-level advisory
lock, so two writers reaching a new month at once create it once.

The pure helpers (month arithmetic, names) take no connection; the rest take a
psycopg connection and commit nothing themselves unless they say so.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from psycopg import pq, sql

from ledger.schema import EVENT_COLUMNS, PARTITION_KEY, TABLE_NAME

Month = tuple[int, int]

DEFAULT_PARTITION: Final = f"{TABLE_NAME}_default"
#: Months created beyond the current one by the writer and ``ledger db maintain``.
MONTHS_AHEAD: Final = 2
_NAME = re.compile(rf"^{TABLE_NAME}_p(\d{{4}})(\d{{2}})$")
# Any 64-bit constant: the key of the advisory lock serialising partition DDL.
_DDL_LOCK: Final = 0x6C65646765727031  # "ledgerp1"
_COLUMNS: Final = ("id", *EVENT_COLUMNS)


# -- pure -------------------------------------------------------------------------------


def month_of(value: dt.datetime) -> Month:
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC)
    return value.year, value.month


def month_of_wire(timestamp: str) -> Month:
    """The month of a wire row's ``started_at`` (naive-UTC ISO text, see ledger.events)."""
    return int(timestamp[:4]), int(timestamp[5:7])


def next_month(month: Month) -> Month:
    year, m = month
    return (year + 1, 1) if m == 12 else (year, m + 1)


def month_start(month: Month) -> dt.datetime:
    return dt.datetime(month[0], month[1], 1, tzinfo=dt.UTC)


def months_between(first: Month, last: Month) -> list[Month]:
    """Every month from ``first`` to ``last``, both included."""
    out, month = [], first
    while month <= last:
        out.append(month)
        month = next_month(month)
    return out


def ahead(now: dt.datetime, count: int = MONTHS_AHEAD) -> list[Month]:
    """This month and the ``count`` after it."""
    first = month_of(now)
    out = [first]
    for _ in range(count):
        out.append(next_month(out[-1]))
    return out


def partition_name(month: Month) -> str:
    return f"{TABLE_NAME}_p{month[0]:04d}{month[1]:02d}"


def parse_partition_name(name: str) -> Month | None:
    """The month a partition holds, or None for any other table (the default included)."""
    found = _NAME.match(name)
    return None if found is None else (int(found.group(1)), int(found.group(2)))


def is_partition(name: str) -> bool:
    """True for the tables that are partitions of ``token_usage`` (not model tables)."""
    return name == DEFAULT_PARTITION or parse_partition_name(name) is not None


# -- on a PostgreSQL connection ------------------------------------------------------------


def is_partitioned(conn: Any, table: str = TABLE_NAME) -> bool:
    """Whether ``table`` is a partitioned table (False for a plain one or none)."""
    row = conn.execute(
        "SELECT c.relkind FROM pg_class c WHERE c.oid = to_regclass(%s)", (table,)
    ).fetchone()
    return row is not None and row[0] == "p"


def months(conn: Any, parent: str = TABLE_NAME) -> set[Month]:
    """The months that have a partition under ``parent``."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = to_regclass(%s)",
        (parent,),
    ).fetchall()
    return {m for (name,) in rows if (m := parse_partition_name(name)) is not None}


@dataclass(frozen=True)
class Created:
    month: Month
    moved_from_default: int


def ensure_months(conn: Any, wanted: Iterable[Month], parent: str = TABLE_NAME) -> list[Created]:
    """Create the partitions of ``wanted`` months that do not exist; commits.

    Each new month's rows already in the default partition move into it in the
    same transaction (``ATTACH`` refuses while the default holds any of them).
    Returns what was created.
    """
    # Inside a caller's transaction each month would be a savepoint, committed
    # (or not) by the caller: refuse, so creation never waits on unrelated work.
    assert conn.info.transaction_status == pq.TransactionStatus.IDLE, "call between transactions"
    created: list[Created] = []
    for month in sorted(set(wanted)):
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
            if month in months(conn, parent):
                continue
            created.append(Created(month, _create(conn, parent, month)))
    return created


def _create(conn: Any, parent: str, month: Month) -> int:
    name, lo, hi = partition_name(month), month_start(month), month_start(next_month(month))
    part, par = sql.Identifier(name), sql.Identifier(parent)
    conn.execute(
        sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)").format(
            part, par
        )
    )
    # The CHECK lets ATTACH skip scanning the new table for rows outside the range.
    conn.execute(
        sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} CHECK ({} >= {} AND {} < {})").format(
            part,
            sql.Identifier(f"{name}_range"),
            sql.Identifier(PARTITION_KEY),
            sql.Literal(lo),
            sql.Identifier(PARTITION_KEY),
            sql.Literal(hi),
        )
    )
    moved = 0
    default = sql.Identifier(DEFAULT_PARTITION)
    if conn.execute("SELECT to_regclass(%s)", (DEFAULT_PARTITION,)).fetchone()[0]:
        # Rows still arriving in the default would fail the ATTACH: hold them
        # (only them: rows routed to other partitions do not touch this lock).
        conn.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(default))
        cols = sql.SQL(", ").join(map(sql.Identifier, _COLUMNS))
        cur = conn.execute(
            sql.SQL(
                "WITH moved AS (DELETE FROM {default} WHERE {key} >= %s AND {key} < %s "
                "RETURNING {cols}) INSERT INTO {part} ({cols}) SELECT {cols} FROM moved"
            ).format(default=default, key=sql.Identifier(PARTITION_KEY), cols=cols, part=part),
            (lo, hi),
        )
        moved = max(cur.rowcount, 0)
    conn.execute(
        sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM ({}) TO ({})").format(
            par, part, sql.Literal(lo), sql.Literal(hi)
        )
    )
    conn.execute(
        sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(part, sql.Identifier(f"{name}_range"))
    )
    return moved


def create_default(conn: Any, parent: str = TABLE_NAME) -> None:
    conn.execute(
        sql.SQL("CREATE TABLE IF NOT EXISTS {} PARTITION OF {} DEFAULT").format(
            sql.Identifier(DEFAULT_PARTITION), sql.Identifier(parent)
        )
    )


def months_in_default(conn: Any) -> set[Month]:
    rows = conn.execute(
        sql.SQL(
            "SELECT DISTINCT date_trunc('month', {key} AT TIME ZONE 'UTC') FROM {default}"
        ).format(key=sql.Identifier(PARTITION_KEY), default=sql.Identifier(DEFAULT_PARTITION))
    ).fetchall()
    return {(d.year, d.month) for (d,) in rows}


def maintain(conn: Any, now: dt.datetime, count: int = MONTHS_AHEAD) -> list[Created]:
    """Partitions for this month, ``count`` ahead, and every month stranded in the default."""
    stranded = months_in_default(conn)
    conn.commit()
    return ensure_months(conn, [*ahead(now, count), *stranded])
