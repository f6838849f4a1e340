"""chronos_nodes.fired_per_second: each node's fire rate, written with its heartbeat

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-12

A nullable column (no rewrite of the table, no lock beyond the instant of the ALTER): each node
writes the messages it fired per second over its last heartbeat interval; the admin API's nodes
answer sums the live nodes' into the cluster's fire rate (the console shows it).

Rolling upgrade: compatible with the previous release both ways. Its heartbeat leaves the column
as it is (null for its nodes, which then count as reporting nothing); the downgrade drops it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "chronos_nodes",
        sa.Column(
            "fired_per_second",
            sa.Double(),
            nullable=True,
            comment="messages the node fired per second over its last heartbeat interval",
        ),
    )


def downgrade() -> None:
    op.drop_column("chronos_nodes", "fired_per_second")
