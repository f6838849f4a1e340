"""The shard a database is: chronos_shard

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29

``chronos_shard`` holds one row, written by ``chronos migrate`` (docs/shards.md): which shard
this database is (0 to shards - 1), of how many, and the map from input partition to shard
(``CHRONOS_SHARD_MAP``'s canonical text). A node compares it with its own settings at start and
refuses to start when they differ: a node that took the databases in another order, or a
different map, would write messages to the wrong database. A database without a row is one
shard's, as every deployment before this revision.

The nodes' role reads it: SELECT is granted to PUBLIC (one row of layout, no message data), so
the upgrade needs no new grant. Created IF NOT EXISTS, so a re-run goes through.

Rolling upgrade: compatible with the previous release both ways (a table it never reads).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chronos_shard",
        sa.Column(
            "id",
            sa.SmallInteger,
            primary_key=True,
            server_default=sa.text("1"),
            comment="always 1: one row",
        ),
        sa.Column("shard", sa.Integer, nullable=False, comment="this database's shard"),
        sa.Column("shards", sa.Integer, nullable=False, comment="how many shards there are"),
        sa.Column(
            "map", sa.Text, nullable=False, comment="input partition to shard (CHRONOS_SHARD_MAP)"
        ),
        sa.Column(
            "recorded_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
            comment="when chronos migrate wrote it (DB clock)",
        ),
        sa.CheckConstraint("id = 1", name="chronos_shard_one_row"),
        if_not_exists=True,
    )
    op.execute("GRANT SELECT ON chronos_shard TO PUBLIC")


def downgrade() -> None:
    op.drop_table("chronos_shard", if_exists=True)
