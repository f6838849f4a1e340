"""chronos_nodes.fired_at: when each node last had a record delivered, written with its heartbeat

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28

A nullable column (no rewrite of the table, no lock beyond the instant of the ALTER): each node
writes, with its heartbeat, when (on the database clock) its firing last had a record delivered.
A node whose own deliveries stall reads its peers' (``peers_delivering``): peers delivering
since its stall began mean it alone is cut off from Kafka, and it gives its claims back for them
to fire; nobody delivering means the cluster's writes stall (a broker's death), and it waits.

Rolling upgrade: compatible with the previous release both ways. Its heartbeat leaves the column
as it is (null for its nodes, which then never count as delivering: a node of this release beside
them waits out its delivery timeout, as the previous release did); the downgrade drops it.
Re-runnable: the column is added only if it is missing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    columns = {c["name"] for c in sa.inspect(op.get_bind()).get_columns("chronos_nodes")}
    if "fired_at" in columns:
        return
    op.add_column(
        "chronos_nodes",
        sa.Column(
            "fired_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="when the node last had a fired record delivered (DB clock; null: not yet)",
        ),
    )


def downgrade() -> None:
    op.drop_column("chronos_nodes", "fired_at")
