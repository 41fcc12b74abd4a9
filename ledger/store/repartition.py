"""``ledger db partition``: turn a PostgreSQL ledger's plain ``token_usage`` into the
partitioned one, online, in batches, losing no concurrent write.

1. One short transaction creates ``token_usage_partitioned`` (the model's
   partitioned shape, ``ledger.schema.partitioned_token_usage``, sharing the
   old table's id sequence), its month partitions and default partition, and
   *mirror triggers* on the old table: every insert, update and delete that
   commits from then on is applied to the new table in the same transaction.
   ``CREATE TRIGGER`` waits for the transactions already writing, so every row
   not mirrored was committed before the copy starts.
2. The rows up to the highest id at that moment are copied by id range, one
   transaction per batch, ``ON CONFLICT DO NOTHING`` (a mirrored row is there
   already). The batch reads its rows ``FOR SHARE``, so an update or delete
   racing a batch waits for it and is then mirrored onto the copied row.
3. One transaction swaps the names under an exclusive lock (a moment: no data
   moves): the old table becomes ``token_usage_unpartitioned`` (kept, to be
   dropped by hand once checked), the new one ``token_usage``; the sequence
   moves to it, and the old table's other triggers (change tracking) are
   recreated on it. Ids are unchanged, so the analytics copy stays valid.

Interrupted, it can be run again: the copy is idempotent.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from psycopg import sql
from sqlalchemy import Engine, MetaData
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex, CreateTable

from ledger.schema import EVENT_COLUMNS, NAMING_CONVENTION, TABLE_NAME, partitioned_token_usage
from ledger.store import partitions

NEW: Final = f"{TABLE_NAME}_partitioned"
OLD: Final = f"{TABLE_NAME}_unpartitioned"
SEQUENCE: Final = f"{TABLE_NAME}_id_seq"
COPY_BATCH: Final = 50_000
_MIRROR: Final = "ledger_partition_mirror"
_COLUMNS: Final = ("id", *EVENT_COLUMNS)


class NotPostgres(Exception):
    """``ledger db partition`` is for PostgreSQL ledgers only."""


@dataclass(frozen=True)
class Result:
    already: bool
    copied: int = 0
    months: int = 0


def _ident_list(names: tuple[str, ...]) -> sql.Composable:
    return sql.SQL(", ").join(map(sql.Identifier, names))


def _mirror_functions() -> dict[str, sql.Composable]:
    new, cols = sql.Identifier(NEW), _ident_list(_COLUMNS)
    insert = sql.SQL(
        "INSERT INTO {new} ({cols}) SELECT {cols} FROM new_rows ON CONFLICT DO NOTHING;"
    ).format(new=new, cols=cols)
    remove = sql.SQL(
        "DELETE FROM {new} n USING old_rows o WHERE n.id = o.id AND n.started_at = o.started_at;"
    ).format(new=new)
    return {
        "INSERT": insert,
        "UPDATE": sql.Composed([remove, sql.SQL(" "), insert]),
        "DELETE": remove,
    }


_REFERENCING: Final = {
    "INSERT": "NEW TABLE AS new_rows",
    "UPDATE": "OLD TABLE AS old_rows NEW TABLE AS new_rows",
    "DELETE": "OLD TABLE AS old_rows",
}


def _create_new(pg: Any) -> None:
    table = partitioned_token_usage(MetaData(naming_convention=NAMING_CONVENTION), NEW)
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    pg.execute(str(CreateTable(table).compile(dialect=dialect)))
    for index in table.indexes:
        pg.execute(str(CreateIndex(index).compile(dialect=dialect)))
    # One sequence for both tables: ids written during the copy never collide.
    pg.execute(
        sql.SQL("ALTER TABLE {} ALTER COLUMN id SET DEFAULT nextval({})").format(
            sql.Identifier(NEW), sql.Literal(SEQUENCE)
        )
    )
    pg.execute(sql.SQL("DROP SEQUENCE {}").format(sql.Identifier(f"{NEW}_id_seq")))
    partitions.create_default(pg, NEW)


def _install_mirror(pg: Any) -> None:
    for event, body in _mirror_functions().items():
        function = sql.Identifier(f"{_MIRROR}_{event.lower()}")
        pg.execute(
            sql.SQL(
                "CREATE OR REPLACE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {} "
                "RETURN NULL; END $$"
            ).format(function, body)
        )
        pg.execute(
            sql.SQL(
                "CREATE OR REPLACE TRIGGER {} AFTER {} ON {} REFERENCING {} FOR EACH STATEMENT "
                "EXECUTE FUNCTION {}()"
            ).format(
                function,
                sql.SQL(event),
                sql.Identifier(TABLE_NAME),
                sql.SQL(_REFERENCING[event]),
                function,
            )
        )


def _drop_mirror(pg: Any) -> None:
    for event in _REFERENCING:
        function = sql.Identifier(f"{_MIRROR}_{event.lower()}")
        pg.execute(
            sql.SQL("DROP TRIGGER IF EXISTS {} ON {}").format(function, sql.Identifier(TABLE_NAME))
        )
        pg.execute(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(function))


def _copy(pg: Any, high: int, batch: int, progress: Callable[[int, int], None] | None) -> int:
    cols = _ident_list(_COLUMNS)
    statement = sql.SQL(
        "INSERT INTO {new} ({cols}) SELECT {cols} FROM {old} WHERE id > %s AND id <= %s "
        "FOR SHARE ON CONFLICT DO NOTHING"
    ).format(new=sql.Identifier(NEW), old=sql.Identifier(TABLE_NAME), cols=cols)
    copied, low = 0, 0
    while low < high:
        with pg.transaction():
            copied += max(pg.execute(statement, (low, low + batch)).rowcount, 0)
        low += batch
        if progress is not None:
            progress(min(low, high), high)
    return copied


def _renames(pg: Any, table: str, old_prefix: str, new_prefix: str) -> list[sql.Composable]:
    """Statements renaming ``table``'s constraints and indexes from one name stem to another."""
    out: list[sql.Composable] = []
    constraints = pg.execute(
        "SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(%s) AND contype IN "
        "('p', 'u')",
        (table,),
    ).fetchall()
    for (name,) in constraints:
        out.append(
            sql.SQL("ALTER TABLE {} RENAME CONSTRAINT {} TO {}").format(
                sql.Identifier(table),
                sql.Identifier(name),
                sql.Identifier(name.replace(old_prefix, new_prefix, 1)),
            )
        )
    indexes = pg.execute(
        "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = to_regclass(%s) AND NOT EXISTS "
        "(SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)",
        (table,),
    ).fetchall()
    for (name,) in indexes:
        out.append(
            sql.SQL("ALTER INDEX {} RENAME TO {}").format(
                sql.Identifier(name), sql.Identifier(name.replace(old_prefix, new_prefix, 1))
            )
        )
    return out


def _swap(pg: Any) -> None:
    with pg.transaction():
        pg.execute(
            sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(TABLE_NAME))
        )
        _drop_mirror(pg)
        triggers = pg.execute(
            "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger "
            "WHERE tgrelid = to_regclass(%s) AND NOT tgisinternal ORDER BY tgname",
            (TABLE_NAME,),
        ).fetchall()
        for name, _definition in triggers:
            pg.execute(
                sql.SQL("DROP TRIGGER {} ON {}").format(
                    sql.Identifier(name), sql.Identifier(TABLE_NAME)
                )
            )
        for statement in _renames(pg, TABLE_NAME, TABLE_NAME, OLD):
            pg.execute(statement)
        pg.execute(
            sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                sql.Identifier(TABLE_NAME), sql.Identifier(OLD)
            )
        )
        for statement in _renames(pg, NEW, NEW, TABLE_NAME):
            pg.execute(statement)
        pg.execute(
            sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                sql.Identifier(NEW), sql.Identifier(TABLE_NAME)
            )
        )
        pg.execute(
            sql.SQL("ALTER SEQUENCE {} OWNED BY {}.id").format(
                sql.Identifier(SEQUENCE), sql.Identifier(TABLE_NAME)
            )
        )
        for _name, definition in triggers:
            pg.execute(definition)  # names the table token_usage: now the partitioned one


def partition(
    engine: Engine,
    now: dt.datetime,
    *,
    batch: int = COPY_BATCH,
    progress: Callable[[int, int], None] | None = None,
) -> Result:
    """Convert ``token_usage`` to the partitioned table online (see the module docstring)."""
    if engine.dialect.name != "postgresql":
        raise NotPostgres("partitioning is for PostgreSQL ledgers; SQLite keeps one table")
    raw = engine.raw_connection()
    try:
        pg: Any = raw.driver_connection
        # Each statement its own transaction unless inside `pg.transaction()`.
        pg.rollback()  # the pool's pre-ping may have opened one
        pg.autocommit = True
        if partitions.is_partitioned(pg):
            return Result(already=True)
        with pg.transaction():
            exists = pg.execute("SELECT to_regclass(%s)", (NEW,)).fetchone()[0] is not None
            if not exists:
                _create_new(pg)
        # Month partitions (and rows parked in the default, on a rerun) before the copy.
        with pg.transaction():
            first, last = pg.execute(
                sql.SQL("SELECT min(started_at), max(started_at) FROM {}").format(
                    sql.Identifier(TABLE_NAME)
                )
            ).fetchone()
        wanted = set(partitions.ahead(now))
        if first is not None:
            wanted.update(
                partitions.months_between(partitions.month_of(first), partitions.month_of(last))
            )
        created = partitions.ensure_months(pg, wanted, parent=NEW)
        # Only now, with every month in place, do writes start reaching the new table.
        with pg.transaction():
            _install_mirror(pg)
        with pg.transaction():
            high = pg.execute(
                sql.SQL("SELECT coalesce(max(id), 0) FROM {}").format(sql.Identifier(TABLE_NAME))
            ).fetchone()[0]
        copied = _copy(pg, int(high), batch, progress)
        _swap(pg)
        return Result(already=False, copied=copied, months=len(created))
    finally:
        pg.autocommit = False
        raw.close()
