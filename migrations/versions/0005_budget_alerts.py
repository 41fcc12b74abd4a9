"""Create budget_alerts: the state behind "at most one alert per budget per threshold per period".

Revision ID: 0005
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import ledger.schema

revision: str = "0005"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "budget_alerts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("budget", sa.String(length=256), nullable=False),
        sa.Column("metric", sa.String(length=16), nullable=False),
        sa.Column("subject", sa.String(length=256), server_default=sa.text("''"), nullable=False),
        sa.Column("period", sa.Date(), nullable=False),
        sa.Column("threshold", sa.String(length=8), nullable=False),
        sa.Column("spent_usd", ledger.schema.Money(), nullable=True),
        sa.Column("limit_usd", ledger.schema.Money(), nullable=False),
        sa.Column("claimed_at", ledger.schema.UTCDateTime(), nullable=False),
        sa.Column("sent_at", ledger.schema.UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budget_alerts")),
        sa.UniqueConstraint(
            "budget",
            "metric",
            "subject",
            "period",
            "threshold",
            name=op.f("uq_budget_alerts_budget"),
        ),
    )


def downgrade() -> None:
    op.drop_table("budget_alerts")
