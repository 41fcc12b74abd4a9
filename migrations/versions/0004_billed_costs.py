"""Costs that match the bill: the modality split and the billed figures.

* ``usage_details`` (JSON): the per-modality token split a response reported
  (audio is billed at its own rates) and 1-hour cache writes, so a cost can be
  recomputed from the row (``ledger reprice``).
* ``billed_cost_usd``, ``billed_at``, ``billing`` (JSON): what the bill says,
  stored by ``ledger reconcile openrouter``; ``cost_usd`` keeps the estimate.

Revision ID: 0004
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import ledger.schema

revision: str = "0004"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("token_usage") as batch:
        batch.add_column(sa.Column("usage_details", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("billed_cost_usd", ledger.schema.Money(), nullable=True))
        batch.add_column(sa.Column("billed_at", ledger.schema.UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("billing", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("token_usage") as batch:
        batch.drop_column("billing")
        batch.drop_column("billed_at")
        batch.drop_column("billed_cost_usd")
        batch.drop_column("usage_details")
