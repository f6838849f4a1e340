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
from psycopg import sql

from chronos.store.migrate import index_partitions

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

TABLE = "chronos_history"
INDEX = "chronos_history_key_idx"
# The key's first chronos.store.filters.KEY_INDEXED_BYTES bytes, then the list's order.
DEFINITION = sql.SQL("(substring(message_key from 1 for 64), outcome, deadline, id)")


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
        index_partitions(op, TABLE, INDEX, DEFINITION, "_key_idx")


def downgrade() -> None:
    # Dropping the parent's index drops the partitions' attached to it; dropping the column, any
    # left unattached by an interrupted upgrade.
    op.drop_index(INDEX, table_name=TABLE, if_exists=True)
    op.drop_column(TABLE, "message_key", if_exists=True)
