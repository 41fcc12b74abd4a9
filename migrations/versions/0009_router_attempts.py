"""The upstreams OpenRouter's router tried inside each attempt.

* ``token_usage.router_attempts`` (JSON, nullable): ``[{"upstream", "status",
  "latency_ms"}, ...]`` in the order the router tried them, from OpenRouter's
  router metadata (``X-OpenRouter-Metadata: enabled``) or its generation record's
  ``provider_responses``. NULL for every row before this revision, and for rows
  whose response said nothing about its router's attempts.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("token_usage") as batch:
        batch.add_column(sa.Column("router_attempts", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("token_usage") as batch:
        batch.drop_column("router_attempts")
