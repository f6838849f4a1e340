"""chronos_history's tenant index holds the named tenants' records only

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28

``chronos_history_tenant_idx (tenant, outcome, deadline, id)`` held an entry for every record,
the default tenant's ('') too: in a deployment without tenants, one B-tree entry per ended message
that no read uses (a list of the default tenant walks the outcome index, most records being
its), and the history's largest index (99 MB per million records). It is replaced by
``chronos_history_tenanted_idx``, the same columns ``WHERE tenant <> ''``: a tenant's list, its
count and its deletion name the tenant, from which the planner proves the predicate; the default
tenant's are read through the outcome index, filtered.

The new index is built as 0014 builds its own (``index_partitions``: on the parent ONLY, then
CONCURRENTLY partition by partition, each attached), so the build never holds the inserts of the
statements that end messages. Then the old one is dropped: a partitioned index cannot be dropped
CONCURRENTLY, so the drop takes the table's lock for an instant, waiting at most 2 s for
it (a long transaction on the history) and trying again ten times before it
fails; a re-run goes on from there.

Rolling upgrade: compatible with the previous release both ways. Its inserts write the new index
as this release's do; its reads of one tenant name the tenant and use the new index (a custom
plan proves the predicate; a generic plan of its tenant count reads the outcome index instead).
The downgrade builds the full index again the same way, then drops the partial one.
Re-runnable both ways.
"""

from __future__ import annotations

from alembic import op
from psycopg import sql

from chronos.store.migrate import drop_partitioned_index, index_partitions

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

TABLE = "chronos_history"
FULL = "chronos_history_tenant_idx"
PARTIAL = "chronos_history_tenanted_idx"
FULL_DEFINITION = sql.SQL("(tenant, outcome, deadline, id)")
PARTIAL_DEFINITION = sql.SQL("(tenant, outcome, deadline, id) WHERE tenant <> ''")


def upgrade() -> None:
    with op.get_context().autocommit_block():
        index_partitions(op, TABLE, PARTIAL, PARTIAL_DEFINITION, "_tenanted_idx")
        drop_partitioned_index(op, FULL)


def downgrade() -> None:
    with op.get_context().autocommit_block():
        index_partitions(op, TABLE, FULL, FULL_DEFINITION, "_tenant_idx")
        drop_partitioned_index(op, PARTIAL)
