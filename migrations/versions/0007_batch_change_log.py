"""Change log: range entries, and on PostgreSQL a row-level insert trigger the writer can skip.

``ledger_changes`` gains ``last_id``: an entry names the ids ``row_id`` to
``coalesce(last_id, row_id)``, every one of them part of that change (a
missing id in a range is a row that is not there, like a deleted one). The
PostgreSQL writer logs each batch itself as a few range entries (see
``ledger.store.sink``).

PostgreSQL: the statement-level insert trigger of 0003 is replaced by a
row-level one whose ``WHEN`` skips rows while the transaction-local setting
``ledger.sink_logs`` is ``on`` (the writer's batches, already logged). Why: an
insert trigger with a transition table on a partitioned table makes ``COPY``
insert row by row (PostgreSQL's copyfrom.c, even while the trigger is
disabled), which cost the writer 17 % of its rows/s; a row-level AFTER trigger
does not, and its ``WHEN`` is evaluated before any event is queued. Every
other insert (psql, other tools, ``ledger db partition``) is still logged, one
entry per row. Row triggers on a partitioned table are cloned onto every
partition, present and future. Update and delete keep their statement
triggers (they never touch ``COPY``).

SQLite keeps its triggers: only the column is added.

Downgrade expands the range entries into one entry per id (appended, so a
reader above them sees them again), then restores 0003's insert trigger.

Revision ID: 0007
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TRIGGER = "token_usage_log_insert"
_ROW_FUNCTION = "ledger_log_new_row"
#: ledger.store.sink.SINK_LOGS_SETTING: the writer sets it for its own transaction.
_SETTING = "ledger.sink_logs"


def upgrade() -> None:
    op.add_column("ledger_changes", sa.Column("last_id", sa.BigInteger(), nullable=True))
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP TRIGGER IF EXISTS {_TRIGGER} ON token_usage")
    op.execute("DROP FUNCTION IF EXISTS ledger_log_new_rows()")
    op.execute(
        f"CREATE FUNCTION {_ROW_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ "  # noqa: S608
        "BEGIN INSERT INTO ledger_changes (row_id) VALUES (NEW.id); RETURN NULL; END $$"
    )
    op.execute(
        f"CREATE TRIGGER {_TRIGGER} AFTER INSERT ON token_usage FOR EACH ROW "
        f"WHEN (current_setting('{_SETTING}', true) IS DISTINCT FROM 'on') "
        f"EXECUTE FUNCTION {_ROW_FUNCTION}()"
    )


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    # One entry per id, as 0003 reads the log; appended above every seq a reader has seen.
    if dialect == "postgresql":
        op.execute(
            "INSERT INTO ledger_changes (row_id) SELECT generate_series(row_id + 1, last_id) "
            "FROM ledger_changes WHERE last_id > row_id ORDER BY seq"
        )
    else:
        op.execute(
            "INSERT INTO ledger_changes (row_id) WITH RECURSIVE r(seq, id, last_id) AS ("
            "SELECT seq, row_id + 1, last_id FROM ledger_changes WHERE last_id > row_id "
            "UNION ALL SELECT seq, id + 1, last_id FROM r WHERE id < last_id) "
            "SELECT id FROM r ORDER BY seq, id"
        )
    if dialect == "postgresql":
        op.execute(f"DROP TRIGGER IF EXISTS {_TRIGGER} ON token_usage")
        op.execute(f"DROP FUNCTION IF EXISTS {_ROW_FUNCTION}()")
        op.execute(
            "CREATE FUNCTION ledger_log_new_rows() RETURNS trigger LANGUAGE plpgsql AS $$ "
            "BEGIN INSERT INTO ledger_changes (row_id) SELECT id FROM new_rows; RETURN NULL; END $$"
        )
        op.execute(
            f"CREATE TRIGGER {_TRIGGER} AFTER INSERT ON token_usage REFERENCING NEW TABLE AS "
            "new_rows FOR EACH STATEMENT EXECUTE FUNCTION ledger_log_new_rows()"
        )
    # A plain DROP COLUMN (SQLite 3.35+): a batch rebuild of ledger_changes would trip
    # over token_usage's triggers, which name it, while it is renamed.
    op.drop_column("ledger_changes", "last_id")
