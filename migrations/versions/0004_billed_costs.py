"""token_usage.usage_details: the per-modality token split a response reported.

Audio tokens are billed at their own rates (Gemini's AUDIO modality, OpenAI's
``audio_tokens``); the split is kept so a cost can be recomputed from the row.

Revision ID: 0004
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("token_usage") as batch:
        batch.add_column(sa.Column("usage_details", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("token_usage") as batch:
        batch.drop_column("usage_details")
