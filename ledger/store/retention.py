"""``ledger db retention``: forget rows older than a kept period.

Two methods, chosen by how the table is stored:

* PostgreSQL, partitioned: whole month partitions are detached and dropped,
  which costs no row-by-row delete, no dead tuples and no vacuum. Only months
  that end before the cutoff go, so at least the kept period stays (up to a
  month more). Dropping a table fires no row triggers, so when the ledger has
  the change log (``ledger_changes``, read by the analytics sync) the dropped
  rows' ids are written to it in the dropping transaction, exactly as the
  delete triggers would have; without it, the analytics copy notices the
  missing rows on its next sync as it notices any delete.
* SQLite, and a PostgreSQL table not yet partitioned: batched deletes of the
  rows started before the cutoff, each batch its own short transaction so
  writers keep writing. Triggers on the table log these deletes themselves.

Both report the rows and the spend they remove; the plan alone is the dry run.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Literal

from psycopg import sql
from sqlalchemy import Engine, delete, func, select

from ledger.errors import ConfigurationError
from ledger.schema import TABLE_NAME, token_usage
from ledger.store import partitions

DELETE_BATCH: Final = 10_000
_KEEP = re.compile(r"^\s*(\d+)\s*d\s*$")
_CHANGES: Final = "ledger_changes"

Method = Literal["drop partitions", "batched delete"]


class BadRetention(ConfigurationError):
    """A ``--keep`` the command cannot read."""


def parse_keep(text: str) -> dt.timedelta:
    """``"400d"`` → 400 days. Days only: months and years have no fixed length."""
    found = _KEEP.match(text)
    if found is None or int(found.group(1)) < 1:
        raise BadRetention(f"--keep {text!r}: expected a whole number of days, e.g. 400d")
    return dt.timedelta(days=int(found.group(1)))


@dataclass(frozen=True)
class Plan:
    method: Method
    #: Rows started before this go.
    cutoff: dt.datetime
    rows: int
    spend: Decimal
    #: The partitions dropped (``drop partitions`` only).
    partitions: tuple[str, ...] = ()


def _is_partitioned(engine: Engine) -> bool:
    if engine.dialect.name != "postgresql":
        return False
    with engine.connect() as conn:
        return partitions.is_partitioned(conn.connection.driver_connection)


def plan(engine: Engine, keep: dt.timedelta, now: dt.datetime) -> Plan:
    """What retention would remove; reads only."""
    cutoff = now.astimezone(dt.UTC) - keep
    if _is_partitioned(engine):
        boundary = partitions.month_start(partitions.month_of(cutoff))
        with engine.connect() as conn:
            names = _droppable(conn.connection.driver_connection, boundary)
            rows, spend = _count(conn, boundary)
        return Plan("drop partitions", boundary, rows, spend, tuple(names))
    with engine.connect() as conn:
        rows, spend = _count(conn, cutoff)
    return Plan("batched delete", cutoff, rows, spend)


def _count(conn: Any, cutoff: dt.datetime) -> tuple[int, Decimal]:
    t = token_usage
    rows, spend = conn.execute(
        select(func.count(), func.coalesce(func.sum(t.c.cost_usd), 0)).where(
            t.c.started_at < cutoff
        )
    ).one()
    return int(rows), Decimal(spend)


def _droppable(pg: Any, boundary: dt.datetime) -> list[str]:
    last = partitions.month_of(boundary)
    return [partitions.partition_name(m) for m in sorted(partitions.months(pg)) if m < last]


def _detached(pg: Any) -> list[str]:
    """Month tables detached from ``token_usage`` and not yet dropped (nothing's partition)."""
    found = pg.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind = 'r' AND n.nspname = current_schema() AND NOT c.relispartition"
    ).fetchall()
    return sorted(name for (name,) in found if partitions.parse_partition_name(name) is not None)


def apply(engine: Engine, keep: dt.timedelta, now: dt.datetime) -> Plan:
    """Remove what :func:`plan` describes; returns what was actually removed."""
    cutoff = now.astimezone(dt.UTC) - keep
    if _is_partitioned(engine):
        return _drop_partitions(engine, partitions.month_start(partitions.month_of(cutoff)))
    return _delete_batches(engine, cutoff)


def _drop_partitions(engine: Engine, boundary: dt.datetime) -> Plan:
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        # Each statement its own transaction unless inside `pg.transaction()`.
        pg.rollback()  # the pool's pre-ping may have opened one
        pg.autocommit = True
        # Old rows parked in the default partition move to their months first,
        # so they go with them.
        stranded = {
            m for m in partitions.months_in_default(pg) if m < partitions.month_of(boundary)
        }
        partitions.ensure_months(pg, stranded)
        logged = pg.execute("SELECT to_regclass(%s)", (_CHANGES,)).fetchone()[0] is not None
        pg.commit()
        # Detach each month in its own short transaction (it holds the parent's
        # exclusive lock, so writers wait only for that), then log and drop the
        # detached tables. A run interrupted between the two leaves detached
        # month tables, which the next run finishes first.
        for name in _droppable(pg, boundary):
            pg.execute(
                sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(
                    sql.Identifier(TABLE_NAME), sql.Identifier(name)
                )
            )
        rows, spend, dropped = 0, Decimal(0), []
        for name in _detached(pg):
            with pg.transaction():
                part = sql.Identifier(name)
                n, s = pg.execute(
                    sql.SQL("SELECT count(*), coalesce(sum(cost_usd), 0) FROM {}").format(part)
                ).fetchone()
                if logged:
                    pg.execute(
                        sql.SQL("INSERT INTO {} (row_id) SELECT id FROM {} ORDER BY id").format(
                            sql.Identifier(_CHANGES), part
                        )
                    )
                pg.execute(sql.SQL("DROP TABLE {}").format(part))
            rows, spend = rows + int(n), spend + Decimal(s)
            dropped.append(name)
        return Plan("drop partitions", boundary, rows, spend, tuple(dropped))
    finally:
        pg.autocommit = False
        raw.close()


def _delete_batches(engine: Engine, cutoff: dt.datetime) -> Plan:
    t = token_usage
    rows, spend = 0, Decimal(0)
    oldest = select(t.c.id).where(t.c.started_at < cutoff).order_by(t.c.id).limit(DELETE_BATCH)
    while True:
        with engine.begin() as conn:
            costs = (
                conn.execute(
                    delete(t).where(t.c.id.in_(oldest.scalar_subquery())).returning(t.c.cost_usd)
                )
                .scalars()
                .all()
            )
        if not costs:
            return Plan("batched delete", cutoff, rows, spend)
        rows += len(costs)
        spend += sum((c for c in costs if c is not None), Decimal(0))
