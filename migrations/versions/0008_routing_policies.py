"""Routing policies, and the policy and arm each row was sent under.

* ``routing_policies``: per requested model, the OpenRouter ``provider`` object
  to send and the share of sessions held out, with who, when and why for its
  start and stop; one active policy per model (a partial unique index).
* ``token_usage.policy_id`` and ``arm`` (``treatment`` / ``holdout``): NULL for
  every row sent without a policy, which is every row before this revision.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import ledger.schema

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "routing_policies",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("requested_model", sa.String(length=256), nullable=False),
        sa.Column("provider", sa.JSON(), nullable=False),
        sa.Column("holdout_share", sa.Float(), nullable=False),
        sa.Column("created_at", ledger.schema.UTCDateTime(), nullable=False),
        sa.Column("created_by", sa.String(length=256), nullable=False),
        sa.Column("reason", sa.String(length=1024), nullable=True),
        sa.Column("stopped_at", ledger.schema.UTCDateTime(), nullable=True),
        sa.Column("stopped_by", sa.String(length=256), nullable=True),
        sa.Column("stop_reason", sa.String(length=1024), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_routing_policies")),
    )
    op.create_index(
        "uq_routing_policies_active_model",
        "routing_policies",
        ["requested_model"],
        unique=True,
        sqlite_where=sa.text("stopped_at IS NULL"),
        postgresql_where=sa.text("stopped_at IS NULL"),
    )
    with op.batch_alter_table("token_usage") as batch:
        batch.add_column(sa.Column("policy_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("arm", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("token_usage") as batch:
        batch.drop_column("arm")
        batch.drop_column("policy_id")
    op.drop_index("uq_routing_policies_active_model", table_name="routing_policies")
    op.drop_table("routing_policies")
