"""Recurring messages and per-message expiry: chronos_messages.recurrence and .expires_ms

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26

``recurrence`` holds a series' rule (``chronosEvery`` or ``chronosCron`` with its time zone,
``chronosUntil`` and ``chronosMissed``, as compact JSON: ``chronos.recurrence``); the row's
deadline is its next occurrence, and firing an occurrence advances the row instead of deleting
it (``advance_fired``). ``expires_ms`` is ``chronosExpires``: how late the message (or each
occurrence) may fire before it is dead-lettered or dropped as expired. NULL in both: a one-shot
message with the cluster's default, as every row written before.

Rolling upgrade: two nullable columns without a default (a catalog change only: no table rewrite,
no index), so the previous release keeps working beside the new one. It never reads either
column: its inserts leave them NULL, and a recurring row it claims is fired once and deleted (it
knows no series). Release note: publish recurring messages (and chronosExpires) once every node
runs this release; a series claimed by a node of the previous release ends after that occurrence.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "chronos_messages",
        sa.Column(
            "recurrence",
            sa.Text,
            nullable=True,
            comment="a series' rule (JSON: every/cron, tz, until, missed); NULL: fires once",
        ),
        if_not_exists=True,  # re-runnable
    )
    op.add_column(
        "chronos_messages",
        sa.Column(
            "expires_ms",
            sa.Integer,
            nullable=True,
            comment="chronosExpires: ms an occurrence may fire late (NULL: the default)",
        ),
        if_not_exists=True,
    )


def downgrade() -> None:
    op.drop_column("chronos_messages", "expires_ms", if_exists=True)
    op.drop_column("chronos_messages", "recurrence", if_exists=True)
