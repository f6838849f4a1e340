"""History of ended messages: a table partitioned by day of its end

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-14

``chronos_history`` holds one row per ended message (fired, cancelled, expired, dead-lettered,
replaced by a reschedule; a series: its recorded occurrences), written by the statement that ends
it and kept for CHRONOS_HISTORY_TTL. It is partitioned ``BY RANGE (ended_at)``, one partition a
UTC day (``chronos_history_pYYYYMMDD``), which the leader creates ahead and drops whole once past
their time to live: the migration creates the parent and its indexes (on an empty table, so
at once), no partition, and the two functions the leader creates and drops the days with
(``chronos_history_create_partition``, ``chronos_history_drop_partition``: SECURITY DEFINER,
so the nodes' role needs no ownership; their text is ``chronos.store.schema``'s). Created IF
NOT EXISTS and CREATE OR REPLACE, so a re-run goes through.

Rolling upgrade: additive, compatible with the previous release both ways (a new table it never
reads; the messages it ends while it still runs have no history). Release note: the nodes' role
needs ``GRANT SELECT, INSERT, DELETE ON chronos_history`` (the partition functions are
executable by every role, as functions are by default); without it the messages still fire and
``chronos_history_unrecorded_total`` counts what is not recorded.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import UUID

from chronos.store.schema import DROP_HISTORY_FUNCTIONS, HISTORY_FUNCTIONS

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

TABLE = "chronos_history"


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column(
            "id",
            sa.String(128),
            nullable=False,
            comment="chronosMessageId of the ended message",
        ),
        sa.Column(
            "tenant", sa.String(128), nullable=True, comment="its tenant ('': the default tenant)"
        ),
        sa.Column(
            "outcome",
            sa.String(16),
            nullable=False,
            comment="fired, cancelled, expired, dead-lettered or replaced",
        ),
        sa.Column(
            "deadline",
            sa.DateTime(timezone=True),
            nullable=False,
            comment="the (occurrence's) due",
        ),
        sa.Column(
            "ended_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
            comment="when it ended (DB clock): the partition key",
        ),
        sa.Column(
            "topic", sa.String(249), nullable=True, comment="where it was published (fired, dlq)"
        ),
        sa.Column("kafka_partition", sa.Integer, nullable=True, comment="the record's partition"),
        sa.Column("kafka_offset", sa.BigInteger, nullable=True, comment="the record's offset"),
        sa.Column(
            "lateness_ms", sa.Integer, nullable=True, comment="produced this late after its due"
        ),
        sa.Column("node", UUID(as_uuid=False), nullable=True, comment="the node that ended it"),
        sa.Column(
            "attempt",
            sa.SmallInteger,
            nullable=True,
            comment="publish attempt that delivered it",
        ),
        sa.Column(
            "reason",
            sa.String(500),
            nullable=True,
            comment="why (a reason code, a cancel's source)",
        ),
        sa.Column(
            "ended_by", sa.String(255), nullable=True, comment="who ended it (admin token, kafka)"
        ),
        sa.Column(
            "next_deadline",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="a series' next occurrence after this one (NULL: none, or not a series)",
        ),
        sa.Column(
            "recurring",
            sa.Boolean,
            nullable=False,
            server_default=sa.text("false"),
            comment="an occurrence of a series",
        ),
        postgresql_partition_by="RANGE (ended_at)",
        if_not_exists=True,
    )
    op.create_index(
        "chronos_history_id_idx",
        TABLE,
        ["id", "ended_at"],
        postgresql_ops={"id": "text_pattern_ops"},
        if_not_exists=True,
    )
    op.create_index(
        "chronos_history_outcome_idx",
        TABLE,
        ["outcome", "deadline", "id"],
        if_not_exists=True,
    )
    op.create_index(
        "chronos_history_tenant_idx",
        TABLE,
        ["tenant", "outcome", "deadline", "id"],
        if_not_exists=True,
    )
    op.create_index(
        "chronos_history_ended_idx",
        TABLE,
        ["ended_at"],
        postgresql_using="brin",
        if_not_exists=True,
    )
    for function in HISTORY_FUNCTIONS:  # CREATE OR REPLACE: a re-run goes through
        op.get_bind().exec_driver_sql(function.replace("%", "%%"))


def downgrade() -> None:
    for statement in DROP_HISTORY_FUNCTIONS:
        op.execute(statement)
    # Dropping the parent drops its partitions with it.
    op.drop_table(TABLE, if_exists=True)
