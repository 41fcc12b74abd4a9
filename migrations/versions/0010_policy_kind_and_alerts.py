"""Routing policies that test the sticky key itself, and that alert once when worse.

* ``routing_policies.kind`` (string, not null, ``'provider'`` for every existing
  row): what the policy changes. ``provider``: the treatment arm is sent the
  policy's ``provider`` object. ``session_key``: the treatment arm is sent as today
  (with its sticky key) and the holdout arm without one, so what sticky routing
  saves is measured, not inferred from sessions that differ.
* ``routing_policies.worse_alerted_at`` (timestamp, nullable): when ``ledger
  policy check --notify`` posted that the policy is worse than its holdout beyond
  its interval (claimed before posting, so two checkers send one alert).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import ledger.schema

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("routing_policies") as batch:
        batch.add_column(
            sa.Column("kind", sa.String(16), nullable=False, server_default="provider")
        )
        batch.add_column(sa.Column("worse_alerted_at", ledger.schema.UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("routing_policies") as batch:
        batch.drop_column("worse_alerted_at")
        batch.drop_column("kind")
