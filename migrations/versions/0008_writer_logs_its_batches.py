"""PostgreSQL: the ledger's writer logs its own batches; a row trigger logs everyone else's inserts.

Migration 0003's statement-level INSERT trigger reads a transition table: every
row a COPY writes is copied again into a tuplestore, and on a partitioned
``token_usage`` such a trigger also turns COPY's batched inserts into one insert
per row. Here it is replaced by a row-level ``AFTER INSERT`` trigger that is
skipped (its ``WHEN`` is false, so no trigger call is even queued) while the
transaction has set ``ledger.writer = 'on'``. The writer (ledger.store.sink)
sets it with ``SET LOCAL``, takes the batch's ids from ``token_usage_id_seq``,
copies the rows with those ids and appends them to ``ledger_changes`` in the
same transaction, after the COPY gave the transaction its xid (the order the
analytics sync's gap bound relies on; see ledger.analytics.sync). Any other
insert is logged row by row as before the writer took over; updates and
deletes keep their statement-level triggers.

On a partitioned ``token_usage`` the trigger is created on the parent, which
clones it onto every partition, present and future. SQLite is unchanged (its
writer already logs its own batches).

Revision ID: 0008
Revises: 0003
Create Date: 2026-12-01
"""

# SQL here is composed from module constants only.
# ruff: noqa: S608
from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TRIGGER = "token_usage_log_insert"
_ROW_FUNCTION = "ledger_log_new_row"
_STATEMENT_FUNCTION = "ledger_log_new_rows"  # migration 0003's, kept for the downgrade


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP TRIGGER IF EXISTS {_TRIGGER} ON token_usage")
    op.execute(
        f"CREATE FUNCTION {_ROW_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN INSERT INTO ledger_changes (row_id) VALUES (NEW.id); RETURN NULL; END $$"
    )
    op.execute(
        f"CREATE TRIGGER {_TRIGGER} AFTER INSERT ON token_usage FOR EACH ROW "
        "WHEN (current_setting('ledger.writer', true) IS DISTINCT FROM 'on') "
        f"EXECUTE FUNCTION {_ROW_FUNCTION}()"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP TRIGGER IF EXISTS {_TRIGGER} ON token_usage")
    op.execute(f"DROP FUNCTION IF EXISTS {_ROW_FUNCTION}()")
    op.execute(
        f"CREATE TRIGGER {_TRIGGER} AFTER INSERT ON token_usage REFERENCING NEW TABLE AS new_rows "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {_STATEMENT_FUNCTION}()"
    )
