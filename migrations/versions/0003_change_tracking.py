"""Change tracking: the ledger_changes log, its triggers, and ids SQLite never reuses.

Every insert, update and delete of a ``token_usage`` row appends the row's id
to ``ledger_changes`` inside the writing transaction, so the analytics copy
can read exactly what changed since it last looked, deletes and repricing
included (see ledger.analytics.changes). Existing rows are backfilled as one
change each. On SQLite ``token_usage`` is rebuilt with AUTOINCREMENT, so
deleting the highest rows never lets their ids be handed out again.

PostgreSQL logs with statement-level triggers over transition tables: one
``INSERT … SELECT`` per writer batch rather than one trigger call per row.

Revision ID: 0003
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PG_FUNCTIONS = {
    "ledger_log_new_rows": "SELECT id FROM new_rows",
    "ledger_log_old_rows": "SELECT id FROM old_rows",
    "ledger_log_changed_rows": "SELECT id FROM new_rows UNION SELECT id FROM old_rows",
}
_PG_TRIGGERS = (
    ("token_usage_log_insert", "INSERT", "NEW TABLE AS new_rows", "ledger_log_new_rows"),
    (
        "token_usage_log_update",
        "UPDATE",
        "OLD TABLE AS old_rows NEW TABLE AS new_rows",
        "ledger_log_changed_rows",
    ),
    ("token_usage_log_delete", "DELETE", "OLD TABLE AS old_rows", "ledger_log_old_rows"),
)
# An update that changes a row's id (nothing does) is logged under both ids.
_SQLITE_TRIGGERS = (
    ("token_usage_log_insert", "INSERT", "INSERT INTO ledger_changes (row_id) VALUES (NEW.id);"),
    (
        "token_usage_log_update",
        "UPDATE",
        "INSERT INTO ledger_changes (row_id) SELECT OLD.id UNION SELECT NEW.id;",
    ),
    ("token_usage_log_delete", "DELETE", "INSERT INTO ledger_changes (row_id) VALUES (OLD.id);"),
)


def _create_triggers(dialect: str) -> None:
    if dialect == "postgresql":
        for name, select in _PG_FUNCTIONS.items():
            op.execute(
                f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ "
                f"BEGIN INSERT INTO ledger_changes (row_id) {select}; RETURN NULL; END $$"
            )
        for name, event, tables, function in _PG_TRIGGERS:
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON token_usage REFERENCING {tables} "
                f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
            )
    else:
        for name, event, body in _SQLITE_TRIGGERS:
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON token_usage FOR EACH ROW BEGIN {body} END"
            )


def _drop_triggers(dialect: str) -> None:
    for name, *_ in _PG_TRIGGERS:
        op.execute(
            f"DROP TRIGGER IF EXISTS {name} ON token_usage"
            if dialect == "postgresql"
            else f"DROP TRIGGER IF EXISTS {name}"
        )
    if dialect == "postgresql":
        for name in _PG_FUNCTIONS:
            op.execute(f"DROP FUNCTION IF EXISTS {name}()")


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "sqlite":
        # Recreated with AUTOINCREMENT; the copy keeps every id, and SQLite's
        # sequence starts from the highest of them.
        with op.batch_alter_table(
            "token_usage", recreate="always", table_kwargs={"sqlite_autoincrement": True}
        ):
            pass
    op.create_table(
        "ledger_changes",
        sa.Column(
            "seq",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("row_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_ledger_changes")),
    )
    # Backfill: every existing row is one change, in id order.
    op.execute("INSERT INTO ledger_changes (row_id) SELECT id FROM token_usage ORDER BY id")
    _create_triggers(dialect)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    _drop_triggers(dialect)
    op.drop_table("ledger_changes")
    if dialect == "sqlite":
        with op.batch_alter_table(
            "token_usage", recreate="always", table_kwargs={"sqlite_autoincrement": False}
        ):
            pass
