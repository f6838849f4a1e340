"""Moving an input partition to another shard: chronos_partition_moves, each message's partition

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29

``chronos_messages.input_partition``: the input partition a message was consumed from (NULL: an
admin's or the previous release's write). It says which rows a partition's move
(``chronos shards move``, docs/shards.md) copies to its new shard. A column added without a
default: no table rewrite, an instant.

``chronos_partition_moves``, in every shard: the partitions moved away from the map
(``CHRONOS_SHARD_MAP``, which stays as it was recorded), each with the shard it goes to and its
state, ``moving`` (its rows being copied: no shard takes its messages) or ``moved``; a node
reads it to route a partition's messages, and ``generation`` orders the rows a move writes to
every shard. SELECT is granted to PUBLIC (no message data), so the upgrade needs no new grant.

``chronos_partitions_refused()`` is the fence a node's enqueue statement calls, with several
shards: it takes the moves' advisory lock in shared mode (held until the statement's
transaction ends) and then, in a snapshot of its own, lists the partitions this shard must not
take (moving, or moved to another shard). A move takes the same lock exclusively while it marks
a partition moving, so every enqueue statement either ends before the mark (its rows are copied
with the others) or sees it (it stores none of the partition's rows).

Rolling upgrade: compatible with the previous release both ways (a column it never writes, a
table and a function it never reads). Re-runnable: each object is created if missing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from chronos.store.schema import PARTITION_FENCE

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "chronos_messages",
        sa.Column(
            "input_partition",
            sa.Integer,
            nullable=True,
            comment="the input partition it was consumed from (NULL: not from Kafka)",
        ),
        if_not_exists=True,
    )
    op.create_table(
        "chronos_partition_moves",
        sa.Column("partition", sa.Integer, primary_key=True, comment="the input partition"),
        sa.Column("shard", sa.Integer, nullable=False, comment="the shard it moves to"),
        sa.Column("state", sa.Text, nullable=False, comment="moving, then moved"),
        sa.Column("generation", sa.BigInteger, nullable=False, comment="orders the moves' writes"),
        sa.Column(
            "changed_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
            comment="when its state was written (DB clock)",
        ),
        sa.CheckConstraint("state IN ('moving', 'moved')", name="chronos_partition_moves_state"),
        if_not_exists=True,
    )
    op.execute("GRANT SELECT ON chronos_partition_moves TO PUBLIC")
    op.execute(PARTITION_FENCE)  # CREATE OR REPLACE: a re-run goes through


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS chronos_partitions_refused()")
    op.drop_table("chronos_partition_moves", if_exists=True)
    op.drop_column("chronos_messages", "input_partition", if_exists=True)
