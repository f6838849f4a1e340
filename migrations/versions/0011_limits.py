"""Rate limits: the limited tenants and target topics

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-12

``chronos_limits`` holds one row per rate-limited tenant or target topic (messages per second,
cluster-wide), with when and by whom it was set; the nodes read it every second and share each
limit between the live nodes. Created IF NOT EXISTS, so a re-run goes through.

Rolling upgrade: compatible with the previous release both ways (a new table it never reads: its
nodes fire limited tenants and topics unlimited until they are upgraded). Release note: the nodes'
role needs ``GRANT SELECT, INSERT, UPDATE, DELETE ON chronos_limits``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chronos_limits",
        sa.Column("kind", sa.String(16), primary_key=True, comment="'tenant' or 'topic'"),
        sa.Column(
            "name",
            sa.String(255),
            primary_key=True,
            comment="the tenant ('': the default tenant) or the target topic",
        ),
        sa.Column(
            "per_second",
            sa.Integer,
            nullable=False,
            comment="messages per second, cluster-wide",
        ),
        sa.Column(
            "set_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
            comment="when the limit was set (DB clock)",
        ),
        sa.Column(
            "set_by", sa.String(255), nullable=False, comment="who set it (the token's name)"
        ),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_table("chronos_limits", if_exists=True)
