"""chronos_history's outcome index sets the default tenant's records apart

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29

Since 0015 the tenant index holds the named tenants' records only, and a list of the default
tenant's (``--tenant ''``) walked ``chronos_history_outcome_idx (outcome, deadline, id)``,
filtered: as fast as any page where the default tenant has most records, but where it has few or
none (every message a named tenant's) the walk read the whole outcome to find them — 1.0 s a page
at 10,000,000 records.

``chronos_history_outcome_default_idx (outcome, (coalesce(tenant, '') = ''), deadline, id)``
replaces it: the same entries, each with one more byte (which the deadline's alignment mostly
absorbs), grouped within an outcome by whether the record is the default tenant's. A page of the
default tenant walks its group, in the list's order; a page of every tenant walks both groups and
merges them (two LIMIT-ed walks instead of one); a named tenant's still walks the tenant index.

Built as 0015 builds its index (``index_partitions``: on the parent ONLY, then CONCURRENTLY
partition by partition, each attached), so the build never holds the inserts of the statements
that end messages; then the old one is dropped (``drop_partitioned_index``: the table's lock for
an instant, waited for at most 2 s a try).

Rolling upgrade: compatible with the previous release both ways. Its inserts write the new index
as this release's do. Its list of every tenant reads ``outcome = o ORDER BY deadline, id``, which
the new index serves by outcome only: it sorts the outcome's records, slow on a large history,
until its nodes are replaced (the admin list only; firing never reads the history). The
downgrade builds the old index again the same way, then drops the new one. Re-runnable both ways.
"""

from __future__ import annotations

from alembic import op
from psycopg import sql

from chronos.store.migrate import drop_partitioned_index, index_partitions

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

TABLE = "chronos_history"
OLD = "chronos_history_outcome_idx"
NEW = "chronos_history_outcome_default_idx"
OLD_DEFINITION = sql.SQL("(outcome, deadline, id)")
NEW_DEFINITION = sql.SQL("(outcome, (coalesce(tenant, '') = ''), deadline, id)")


def upgrade() -> None:
    with op.get_context().autocommit_block():
        index_partitions(op, TABLE, NEW, NEW_DEFINITION, "_outcome_default_idx")
        drop_partitioned_index(op, OLD)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        index_partitions(op, TABLE, OLD, OLD_DEFINITION, "_outcome_idx")
        drop_partitioned_index(op, NEW)
