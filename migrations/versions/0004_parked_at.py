"""Parked rows leave the claim's index: chronos_messages.parked_at and the ready index

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24

A row whose publish failed ``2 * max_publish_attempts`` times is parked: ``release_claims`` now
stamps ``parked_at``, and the claim walks ``chronos_messages_ready_idx`` (unclaimed and not
parked), so parked rows at the head of the deadline order cost it nothing.

Rolling upgrade: the column is nullable without a default (a catalog change only) and the index
is built CONCURRENTLY, so upgrading a live cluster never blocks intake or firing. The previous
release keeps working: it never reads or sets ``parked_at``, its claim uses
``chronos_messages_due_idx`` (kept) and skips parked rows by their attempts, which a parked row
keeps until an operator requeues it. Rows the previous release parked (attempts at the threshold,
``parked_at`` NULL) stay excluded from the new release's claim by the same attempts filter; the
new release stamps them at start-up (``park_exhausted``), after which they leave the ready index.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from chronos.store.migrate import drop_invalid_index

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "chronos_messages",
        sa.Column(
            "parked_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="when the row was parked (never claimed until requeued); NULL: not parked",
        ),
        if_not_exists=True,  # re-run after an interruption in the index build below
    )
    with op.get_context().autocommit_block():
        drop_invalid_index(op, "chronos_messages_ready_idx", "chronos_messages")
        op.create_index(
            "chronos_messages_ready_idx",
            "chronos_messages",
            ["deadline"],
            postgresql_where=sa.text("readied_at IS NULL AND parked_at IS NULL"),
            postgresql_concurrently=True,
            if_not_exists=True,
        )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        op.drop_index(
            "chronos_messages_ready_idx",
            table_name="chronos_messages",
            postgresql_concurrently=True,
            if_exists=True,
        )
    op.drop_column("chronos_messages", "parked_at")
