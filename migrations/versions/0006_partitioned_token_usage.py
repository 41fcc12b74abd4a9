"""PostgreSQL: token_usage range-partitioned by month on started_at, BRIN on started_at.

New (empty) PostgreSQL ledgers get the partitioned table: primary key
``(id, started_at)``, ``event_id`` unique together with ``started_at`` (see
``ledger.schema.partitioned_token_usage`` for why idempotency is unchanged), a
default partition as a safety net, and a BRIN index on ``started_at``. Month
partitions are created by the writer and ``ledger db maintain``.

A PostgreSQL ledger that already holds rows is left as it is: rebuilding it
here would lock the table for the whole copy. ``ledger db partition`` converts
it online, in batches, while writers keep writing (``ledger db upgrade`` says
so). SQLite is unchanged.

Triggers already on the table (change tracking) are carried over.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import ledger.schema

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _columns() -> list[sa.Column[object]]:
    return [
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("event_id", sa.String(length=36), nullable=False),
        sa.Column("call_id", sa.String(length=36), nullable=False),
        sa.Column("attempt", sa.SmallInteger(), nullable=False),
        sa.Column("started_at", ledger.schema.UTCDateTime(), nullable=False),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("ttft_ms", sa.Float(), nullable=True),
        sa.Column("session_id", sa.String(length=256), nullable=True),
        sa.Column("actor_id", sa.String(length=256), nullable=True),
        sa.Column("session_key", sa.String(length=256), nullable=True),
        sa.Column("requested_provider", sa.String(length=64), nullable=False),
        sa.Column("requested_model", sa.String(length=256), nullable=False),
        sa.Column("provider", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=True),
        sa.Column("upstream", sa.String(length=128), nullable=True),
        sa.Column("generation_id", sa.String(length=128), nullable=True),
        sa.Column("routing_sort", sa.String(length=32), nullable=True),
        sa.Column("routing_order", sa.String(length=512), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error_type", sa.String(length=32), nullable=True),
        sa.Column("http_status", sa.SmallInteger(), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "cache_read_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False
        ),
        sa.Column(
            "cache_write_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False
        ),
        sa.Column("reasoning_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("cost_usd", ledger.schema.Money(), nullable=True),
        sa.Column("cost_source", sa.String(length=16), nullable=True),
        sa.Column("response_cache_hit", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("streamed", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("paused", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("locale", sa.String(length=35), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=True),
        sa.Column("usage_reported", sa.Boolean(), server_default=sa.true(), nullable=False),
    ]


_INDEXES = (
    ("ix_token_usage_call_id", ["call_id"], "btree"),
    (
        "ix_token_usage_session_id_actor_id_started_at",
        ["session_id", "actor_id", "started_at"],
        "btree",
    ),
    ("ix_token_usage_started_at", ["started_at"], "brin"),
)


def _triggers(bind: sa.Connection) -> list[str]:
    """``CREATE TRIGGER`` statements of the user triggers on token_usage."""
    rows = bind.execute(
        sa.text(
            "SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t "
            "WHERE t.tgrelid = to_regclass('token_usage') AND NOT t.tgisinternal ORDER BY t.tgname"
        )
    )
    return [r[0] for r in rows]


def _is_partitioned(bind: sa.Connection) -> bool:
    kind = bind.execute(
        sa.text("SELECT relkind FROM pg_class WHERE oid = to_regclass('token_usage')")
    ).scalar()
    return bool(kind == "p")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or _is_partitioned(bind):
        return
    if bind.execute(sa.text("SELECT EXISTS (SELECT 1 FROM token_usage)")).scalar():
        return  # converted online by `ledger db partition`
    triggers = _triggers(bind)
    op.drop_table("token_usage")
    op.create_table(
        "token_usage",
        *_columns(),
        sa.PrimaryKeyConstraint("id", "started_at", name=op.f("pk_token_usage")),
        sa.UniqueConstraint("event_id", "started_at", name=op.f("uq_token_usage_event_id")),
        postgresql_partition_by="RANGE (started_at)",
    )
    for name, columns, using in _INDEXES:
        op.create_index(name, "token_usage", columns, unique=False, postgresql_using=using)
    op.execute("CREATE TABLE token_usage_default PARTITION OF token_usage DEFAULT")
    for statement in triggers:
        op.execute(statement)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or not _is_partitioned(bind):
        return
    triggers = _triggers(bind)
    op.create_table(
        "token_usage_unpartitioned",
        *_columns(),
        sa.PrimaryKeyConstraint("id", name="pk_token_usage_unpartitioned"),
        sa.UniqueConstraint("event_id", name="uq_token_usage_unpartitioned_event_id"),
    )
    op.execute("ALTER TABLE token_usage_unpartitioned ALTER COLUMN id DROP DEFAULT")
    op.execute("DROP SEQUENCE token_usage_unpartitioned_id_seq")
    columns = ", ".join(c.name for c in _columns())
    copy = f"INSERT INTO token_usage_unpartitioned ({columns}) SELECT {columns} FROM token_usage"  # noqa: S608
    op.execute(f"{copy} ORDER BY id")
    # The sequence must outlive the partitioned table: ids are never handed out twice.
    op.execute("ALTER SEQUENCE token_usage_id_seq OWNED BY NONE")
    op.drop_table("token_usage")  # and every partition
    op.rename_table("token_usage_unpartitioned", "token_usage")
    op.execute("ALTER TABLE token_usage ALTER COLUMN id SET DEFAULT nextval('token_usage_id_seq')")
    op.execute("ALTER SEQUENCE token_usage_id_seq OWNED BY token_usage.id")
    op.execute(
        "ALTER TABLE token_usage RENAME CONSTRAINT pk_token_usage_unpartitioned TO pk_token_usage"
    )
    op.execute(
        "ALTER INDEX uq_token_usage_unpartitioned_event_id RENAME TO uq_token_usage_event_id"
    )
    for name, columns, _using in _INDEXES:
        op.create_index(name, "token_usage", columns, unique=False)
    for statement in triggers:
        op.execute(statement)
