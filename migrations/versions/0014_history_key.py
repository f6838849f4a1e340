"""chronos_history.message_key: the history keeps each ended message's key, and is found by it

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28

A nullable column without a default (no rewrite of the table or of any day's partition: an
instant, whatever the history holds), which every statement that ends a message now fills, and
one index for the admin list's key filter, as the waiting rows have (0008):
``chronos_history_key_idx (substring(message_key from 1 for 64), outcome, deadline, id)``, an
exact key or a key prefix being a range of it, of each outcome in the list's (deadline, id) order.

A partitioned table's index cannot be built CONCURRENTLY, and a plain build would hold the
inserts of every statement that ends a message for as long as it reads the days kept. So the index
is created on the parent ONLY (no partition read: an instant), then built CONCURRENTLY on each
existing partition and attached to it; once every partition has its own, the parent's is valid. A
partition created meanwhile (the leader's ``chronos_history_create_partition``) gets it when it is
attached, as it gets the others (and the column, through ``LIKE chronos_history``). Re-runnable:
the column and the parent's index are added if missing, a partition whose build was interrupted
(its index INVALID) is built again, one whose index is built but not attached is attached, the
others are skipped.

Rolling upgrade: compatible with the previous release both ways. Its statements name their
columns and leave this one NULL (a record without a key: listed without a key filter, never found
by one); it never reads the index, which costs its history inserts what it costs this release's.
Release note: records written before the upgrade (or by the previous release's nodes during it)
have no key; no grant is needed. The downgrade drops the index and the column (the keys go).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from chronos.store.migrate import drop_invalid_index

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

TABLE = "chronos_history"
INDEX = "chronos_history_key_idx"
KEY_HEAD = "substring(message_key from 1 for 64)"  # chronos.store.filters.KEY_INDEXED_BYTES

# The partitions without an index attached to the parent's: the ones still to build.
UNINDEXED = sa.text(
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
    "WHERE i.inhparent = to_regclass('chronos_history') "
    "AND NOT EXISTS (SELECT 1 FROM pg_index x JOIN pg_inherits xi ON xi.inhrelid = x.indexrelid "
    "                WHERE x.indrelid = c.oid AND xi.inhparent = to_regclass(:index)) "
    "ORDER BY c.relname"
)


# The parent's index, on the parent only: no partition read.
CREATE_ON_PARENT = (
    "CREATE INDEX IF NOT EXISTS chronos_history_key_idx ON ONLY chronos_history "
    "(substring(message_key from 1 for 64), outcome, deadline, id)"
)

# Attach every partition's key index that is built and not attached yet (named as
# ``_partition_index`` names it); SQL of its own, quoting the names itself (%I).
ATTACH_BUILT = """
DO $$
DECLARE part text;
BEGIN
    FOR part IN
        SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = to_regclass('chronos_history')
          AND NOT EXISTS (
              SELECT 1 FROM pg_index x JOIN pg_inherits xi ON xi.inhrelid = x.indexrelid
              WHERE x.indrelid = c.oid
                AND xi.inhparent = to_regclass('chronos_history_key_idx'))
          AND EXISTS (
              SELECT 1 FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid
              WHERE x.indrelid = c.oid AND x.indisvalid
                AND ic.relname = left(c.relname, 54) || '_key_idx')
    LOOP
        EXECUTE format('ALTER INDEX chronos_history_key_idx ATTACH PARTITION %I',
                       left(part, 54) || '_key_idx');
    END LOOP;
END $$
"""


def _partition_index(partition: str) -> str:
    return partition[:54] + "_key_idx"  # within the 63 bytes of an identifier


def upgrade() -> None:
    op.add_column(
        TABLE,
        sa.Column(
            "message_key",
            sa.LargeBinary,
            nullable=True,
            comment="the message's key, byte-exact (NULL: none, or recorded before 0014)",
        ),
        if_not_exists=True,
    )
    with op.get_context().autocommit_block():
        bind = op.get_bind()
        op.execute(CREATE_ON_PARENT)
        op.execute(ATTACH_BUILT)  # a day built by an interrupted run
        for partition in bind.execute(UNINDEXED, {"index": INDEX}).scalars().all():
            name = _partition_index(partition)
            drop_invalid_index(op, name, partition)
            op.create_index(
                name,
                partition,
                [sa.text(KEY_HEAD), "outcome", "deadline", "id"],
                postgresql_concurrently=True,
                if_not_exists=True,
            )
            op.execute(ATTACH_BUILT)


def downgrade() -> None:
    # Dropping the parent's index drops the partitions' attached to it; dropping the column, any
    # left unattached by an interrupted upgrade.
    op.drop_index(INDEX, table_name=TABLE, if_exists=True)
    op.drop_column(TABLE, "message_key", if_exists=True)
