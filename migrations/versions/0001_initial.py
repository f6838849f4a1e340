"""chronos_messages: the one table of the design, byte-exact, with claim and hold-time indexes

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chronos_messages",
        sa.Column(
            "id",
            sa.String(128),
            primary_key=True,
            comment="chronosMessageId: unique among waiting/ready",
        ),
        sa.Column(
            "deadline",
            sa.DateTime(timezone=True),
            nullable=False,
            comment="when the message is due",
        ),
        sa.Column(
            "readied_at", sa.DateTime(timezone=True), nullable=True, comment="claim time (DB clock)"
        ),
        sa.Column(
            "readied_by",
            postgresql.UUID(as_uuid=False),
            nullable=True,
            comment="node that claimed it",
        ),
        sa.Column(
            "message_key",
            sa.LargeBinary,
            nullable=True,
            comment="original key, byte-exact; NULL kept",
        ),
        sa.Column(
            "message_value",
            sa.LargeBinary,
            nullable=True,
            comment="original value; NULL = tombstone",
        ),
        sa.Column(
            "message_headers",
            postgresql.JSONB,
            nullable=True,
            comment='[{"name": base64|null}, ...]',
        ),
        sa.Column(
            "attempts",
            sa.SmallInteger,
            nullable=False,
            server_default=sa.text("0"),
            comment="failed publish attempts so far",
        ),
        sa.Column(
            "last_error",
            sa.String(500),
            nullable=True,
            comment="the last publish error (shown in the dead-letter reason)",
        ),
        sa.Column(
            "target_topic",
            sa.String(249),
            nullable=True,
            comment="reserved: per-message output topic (NULL = the configured output topic)",
        ),
        sa.Column(
            "tenant",
            sa.String(128),
            nullable=True,
            comment="reserved: tenant for fair scheduling under overload",
        ),
        sa.Column(
            "enqueued_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
            comment="when the row was inserted (DB clock)",
        ),
    )
    op.create_index(
        "chronos_messages_due_idx",
        "chronos_messages",
        ["deadline"],
        postgresql_where=sa.text("readied_at IS NULL"),
    )
    # A queue table: every row is inserted, updated once (claimed) and deleted within seconds.
    # Vacuum it eagerly so dead index entries at the head of the due index do not slow claims.
    op.execute(
        "ALTER TABLE chronos_messages SET ("
        "autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, "
        "autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.02, "
        "autovacuum_vacuum_cost_delay = 0)"
    )
    op.create_index(
        "chronos_messages_claimed_idx",
        "chronos_messages",
        ["readied_at"],
        postgresql_where=sa.text("readied_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("chronos_messages_claimed_idx", table_name="chronos_messages")
    op.drop_index("chronos_messages_due_idx", table_name="chronos_messages")
    op.drop_table("chronos_messages")
