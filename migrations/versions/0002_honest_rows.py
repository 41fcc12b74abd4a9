"""Honest rows: 64-bit token counts and ``usage_reported``.

* The five token columns become ``bigint``: a provider reporting more than
  2**31 - 1 tokens was clamped, and priced, silently.
* ``usage_reported`` (boolean, not null, default true) says whether the token
  columns hold the provider's usage for the whole attempt. Existing rows are
  backfilled true: that is what they claimed when they were written.

On SQLite the table is rebuilt (batch mode): SQLite cannot alter a column's
declared type in place. Its integers were already 64-bit on disk, so the data
is copied unchanged.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TOKEN_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)


def upgrade() -> None:
    with op.batch_alter_table("token_usage", schema=None) as batch_op:
        for name in TOKEN_COLUMNS:
            batch_op.alter_column(
                name,
                existing_type=sa.Integer(),
                type_=sa.BigInteger(),
                existing_nullable=False,
                existing_server_default=sa.text("0"),
            )
        batch_op.add_column(
            sa.Column("usage_reported", sa.Boolean(), server_default=sa.true(), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("token_usage", schema=None) as batch_op:
        batch_op.drop_column("usage_reported")
        for name in TOKEN_COLUMNS:
            # Counts above 2**31 - 1 cannot go back: the downgrade fails on them rather
            # than clamp them (PostgreSQL raises "integer out of range").
            batch_op.alter_column(
                name,
                existing_type=sa.BigInteger(),
                type_=sa.Integer(),
                existing_nullable=False,
                existing_server_default=sa.text("0"),
            )
