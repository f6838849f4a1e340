"""chronos_nodes (node heartbeats) and the partial index of rows that failed a publish

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

The index is built CONCURRENTLY so that upgrading a live cluster never blocks intake or firing
while a large chronos_messages table is scanned; it holds only rows whose publish failed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from chronos.store.migrate import drop_invalid_index

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chronos_nodes",
        sa.Column(
            "node_id", postgresql.UUID(as_uuid=False), primary_key=True, comment="the node's UUID"
        ),
        sa.Column(
            "started_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
            comment="when the node started",
        ),
        sa.Column(
            "heartbeat_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
            comment="the node's last heartbeat (DB clock)",
        ),
        sa.Column("hostname", sa.String(255), nullable=True, comment="host the node runs on"),
        sa.Column("version", sa.String(64), nullable=True, comment="Chronos version of the node"),
        if_not_exists=True,  # re-run after an interruption in the index build below
    )
    with op.get_context().autocommit_block():
        drop_invalid_index(op, "chronos_messages_failed_idx", "chronos_messages")
        op.create_index(
            "chronos_messages_failed_idx",
            "chronos_messages",
            ["deadline", "id"],
            postgresql_where=sa.text("attempts > 0"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(
            "chronos_messages_failed_idx",
            table_name="chronos_messages",
            postgresql_concurrently=True,
            if_exists=True,
        )
    op.drop_table("chronos_nodes")
