"""Index of claimed rows by node (release_node at every shutdown was a sequential scan)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

Built CONCURRENTLY: upgrading a live cluster never blocks intake or firing. Compatible with the
previous release (an index only: its statements run unchanged, and its release_node gets faster).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from chronos.store.migrate import drop_invalid_index

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.get_context().autocommit_block():
        drop_invalid_index(op, "chronos_messages_claimed_by_idx", "chronos_messages")
        op.create_index(
            "chronos_messages_claimed_by_idx",
            "chronos_messages",
            ["readied_by", "readied_at"],
            postgresql_where=sa.text("readied_at IS NOT NULL"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(
            "chronos_messages_claimed_by_idx",
            table_name="chronos_messages",
            postgresql_concurrently=True,
            if_exists=True,
        )
