"""Cancel markers: chronos_cancels

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

A ``chronosAction: cancel`` deletes the waiting message and leaves a marker for
``CHRONOS_CANCEL_TTL_MS``, so that a schedule (or reschedule) of that id arriving later — from
another partition, a producer retry or a replayed batch — is dropped. Expired markers are purged
in batches by the enqueue statement, through the ``expires_at`` index.

Rolling upgrade: a new table only (nothing of ``chronos_messages`` changes), so the previous
release keeps working beside the new one; it never reads the table. Until every node runs the new
release, an old node dead-letters a cancel (no deadline) and treats a reschedule as a schedule.
Release note: the nodes' role needs ``GRANT SELECT, INSERT, UPDATE, DELETE ON chronos_cancels``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chronos_cancels",
        sa.Column("id", sa.String(128), primary_key=True, comment="chronosMessageId of a cancel"),
        sa.Column(
            "expires_at",
            sa.DateTime(timezone=True),
            nullable=False,
            comment="until when a schedule of this id is dropped (DB clock)",
        ),
    )
    op.create_index("chronos_cancels_expires_idx", "chronos_cancels", ["expires_at"])


def downgrade() -> None:
    op.drop_index("chronos_cancels_expires_idx", table_name="chronos_cancels")
    op.drop_table("chronos_cancels")
