"""Create token_usage: one row per provider attempt (contract §1).

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import ledger.schema

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "token_usage",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
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
        sa.Column("input_tokens", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("output_tokens", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("cache_read_tokens", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("cache_write_tokens", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("reasoning_tokens", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("cost_usd", ledger.schema.Money(), nullable=True),
        sa.Column("cost_source", sa.String(length=16), nullable=True),
        sa.Column("response_cache_hit", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("streamed", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("paused", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("locale", sa.String(length=35), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_token_usage")),
        sa.UniqueConstraint("event_id", name=op.f("uq_token_usage_event_id")),
    )
    with op.batch_alter_table("token_usage", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_token_usage_call_id"), ["call_id"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_token_usage_session_id_actor_id_started_at"),
            ["session_id", "actor_id", "started_at"],
            unique=False,
        )
        batch_op.create_index(batch_op.f("ix_token_usage_started_at"), ["started_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("token_usage", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_token_usage_started_at"))
        batch_op.drop_index(batch_op.f("ix_token_usage_session_id_actor_id_started_at"))
        batch_op.drop_index(batch_op.f("ix_token_usage_call_id"))
    op.drop_table("token_usage")
