"""Pauses: the paused tenants and target topics

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-12

``chronos_pauses`` holds one row per paused tenant or target topic, with when and by whom; the
nodes read it every second and their claims skip the paused rows. Created IF NOT EXISTS, so a
re-run after an interruption goes through.

Rolling upgrade: compatible with the previous release both ways (a new table it never reads: its
nodes keep firing paused tenants and topics until they are upgraded). Release note: the nodes'
role needs ``GRANT SELECT, INSERT, UPDATE, DELETE ON chronos_pauses``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chronos_pauses",
        sa.Column("kind", sa.String(16), primary_key=True, comment="'tenant' or 'topic'"),
        sa.Column(
            "name",
            sa.String(255),
            primary_key=True,
            comment="the tenant ('': the default tenant) or the target topic",
        ),
        sa.Column(
            "paused_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
            comment="when it was paused (DB clock)",
        ),
        sa.Column(
            "paused_by",
            sa.String(255),
            nullable=False,
            comment="who paused it (the token's name)",
        ),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table("chronos_pauses", if_exists=True)
