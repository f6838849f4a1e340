"""Indexes of the admin list's filters: target topic, id prefix, key, series

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-10

Four partial indexes over the waiting rows (``readied_at IS NULL AND parked_at IS NULL``, as the
ready index): ``(target_topic, deadline)`` of the rows with a topic of their own, ``id
text_pattern_ops`` (an id prefix is a range whatever the collation), ``(substring(message_key from
1 for 64), deadline)`` (an exact key or a key prefix is a range of it) and ``deadline`` of the
series. Each is built CONCURRENTLY, so upgrading a live cluster never blocks intake or firing; an
interrupted build leaves an INVALID index that a re-run drops and builds again.

Rolling upgrade: compatible with the previous release both ways (indexes only: its statements run
unchanged and never read them; they cost its writes what they cost this release's).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from chronos.store.migrate import drop_invalid_index

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

READY = "readied_at IS NULL AND parked_at IS NULL"
TABLE = "chronos_messages"


def _indexes() -> list[tuple[str, list[sa.TextClause | str], str, dict[str, str] | None]]:
    return [
        (
            "chronos_messages_topic_ready_idx",
            ["target_topic", "deadline"],
            f"target_topic IS NOT NULL AND {READY}",
            None,
        ),
        ("chronos_messages_id_ready_idx", ["id"], READY, {"id": "text_pattern_ops"}),
        (
            "chronos_messages_key_ready_idx",
            [sa.text("substring(message_key from 1 for 64)"), "deadline"],
            READY,
            None,
        ),
        (
            "chronos_messages_recurring_ready_idx",
            ["deadline"],
            f"recurrence IS NOT NULL AND {READY}",
            None,
        ),
    ]


def upgrade() -> None:
    with op.get_context().autocommit_block():
        for name, columns, where, ops in _indexes():
            drop_invalid_index(op, name, TABLE)
            op.create_index(
                name,
                TABLE,
                columns,
                postgresql_where=sa.text(where),
                postgresql_ops=ops or {},
                postgresql_concurrently=True,
                if_not_exists=True,
            )


def downgrade() -> None:
    with op.get_context().autocommit_block():
        for name, *_ in reversed(_indexes()):
            op.drop_index(name, table_name=TABLE, postgresql_concurrently=True, if_exists=True)
