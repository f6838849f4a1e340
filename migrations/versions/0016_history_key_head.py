"""chronos_history's key index holds the key's first 64 bytes alone

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29

``chronos_history_key_idx (substring(message_key from 1 for 64), outcome, deadline, id)`` (0014)
wrote the outcome, the deadline and the id into every entry, so that a key's records came out of
the index in the list's order. A key has few records (an order's, a customer's), which a page
sorts at no cost, while every ended message paid for the wide entry: the largest part of what a
record costs the statement that ends it. It is replaced by ``chronos_history_keyhead_idx
(substring(message_key from 1 for 64))``: an exact key or a key prefix is still a range of it,
the outcome and the full key are checked on the records it finds, and a page sorts them. A key
that most records share is read through the outcome index, filtered, as before (the planner's
statistics of the expression tell it so). A third of the size: 31.5 against 94.0 MB per million
records keyed by 100,000 customers.

Built as 0015 builds its index (``index_partitions``: on the parent ONLY, then CONCURRENTLY
partition by partition, each attached), so the build never holds the inserts of the statements
that end messages; then the wide one is dropped (``drop_partitioned_index``: the table's lock for
an instant, waited for at most 2 s a try).

Rolling upgrade: compatible with the previous release both ways. Its inserts write the new index
as this release's do; its key reads compare the same expression, and use the new index. The
downgrade builds the wide index again the same way, then drops the narrow one. Re-runnable both
ways.
"""

from __future__ import annotations

from alembic import op
from psycopg import sql

from chronos.store.migrate import drop_partitioned_index, index_partitions

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

TABLE = "chronos_history"
WIDE = "chronos_history_key_idx"
HEAD = "chronos_history_keyhead_idx"
# The key's first chronos.store.filters.KEY_INDEXED_BYTES bytes.
WIDE_DEFINITION = sql.SQL("(substring(message_key from 1 for 64), outcome, deadline, id)")
HEAD_DEFINITION = sql.SQL("(substring(message_key from 1 for 64))")


def upgrade() -> None:
    with op.get_context().autocommit_block():
        index_partitions(op, TABLE, HEAD, HEAD_DEFINITION, "_keyhead_idx")
        drop_partitioned_index(op, WIDE)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        index_partitions(op, TABLE, WIDE, WIDE_DEFINITION, "_key_idx")
        drop_partitioned_index(op, HEAD)
