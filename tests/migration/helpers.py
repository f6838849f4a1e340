"""What the migration tests share."""

from __future__ import annotations

from typing import Any

import psycopg

from chronos.store import MessageFilter
from chronos.store.postgres.sql import query

# An insert of the release before an upgrade, still running beside the new release during a
# rolling upgrade: its enqueue statement reduced to the columns every release has (no tenant, no
# rule, no expiry of its own).
OLD_INSERT = (
    "INSERT INTO chronos_messages (id, deadline, message_value) "
    "VALUES (%s, now() + interval '200 milliseconds', '\\x00'::bytea)"
)


def history_days(url: str, first: int, count: int) -> None:
    """The history's partitions of ``count`` days from today + ``first``, as the leader makes
    them."""
    with psycopg.connect(url, autocommit=True) as conn:
        for day in range(first, first + count):
            conn.execute(
                "SELECT chronos_history_create_partition(current_date + %s, 86400000)", (day,)
            )


def attached_indexes(url: str, index: str) -> dict[str, bool | None]:
    """Each partition of the history: the validity of its index attached to the parent's
    ``index`` (None: none attached); and, under ``chronos_history``, the parent's own (None: no
    such index)."""
    with psycopg.connect(url) as conn:
        parent = conn.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", (index,)
        ).fetchone()
        rows = conn.execute(
            "SELECT c.relname, x.indisvalid "
            "FROM pg_inherits p JOIN pg_class c ON c.oid = p.inhrelid "
            "LEFT JOIN (pg_index x JOIN pg_inherits xi ON xi.inhrelid = x.indexrelid "
            "           AND xi.inhparent = to_regclass(%s)) ON x.indrelid = c.oid "
            "WHERE p.inhparent = 'chronos_history'::regclass ORDER BY 1",
            (index,),
        ).fetchall()
    found: dict[str, bool | None] = dict(rows)
    found["chronos_history"] = None if parent is None else parent[0]
    return found


def plan(url: str, name: str, params: dict[str, Any]) -> str:
    """EXPLAIN of a named statement as the node's session runs it (custom plans), values inline."""
    with psycopg.connect(url, cursor_factory=psycopg.ClientCursor) as conn:
        conn.execute("SET plan_cache_mode = force_custom_plan")
        conn.execute("SET enable_seqscan = off")  # tiny tables: show what the planner can use
        rows = conn.execute("EXPLAIN (COSTS OFF) " + query(name).strip().rstrip(";"), params)
        return "\n".join(r[0] for r in rows.fetchall())


def list_ended_params(where: MessageFilter, outcomes: list[str]) -> dict[str, Any]:
    """The parameters of ``find_ended`` for the first page of ``where`` over ``outcomes``."""
    params = {k: v for k, v in where.params().items() if k not in ("state", "topic_unset")}
    return {
        **params,
        "outcomes": outcomes,
        "after_deadline": None,
        "after_id": None,
        "limit": 101,
        "max_bytes": None,
    }
