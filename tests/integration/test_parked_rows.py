"""Parked rows stay out of the claim's way.

A row parked after ``2 * max_publish_attempts`` failed publishes is never claimed again, but it
kept its place at the head of the due index (deadline order), so every claim walked over every
parked row before it reached a claimable one: the work of a claim grew with the number of parked
rows. Parked rows are now stamped (``parked_at``) and the claim walks an index without them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from chronos.protocol import ScheduledMessage
from chronos.store import PostgresStore, session_options
from chronos.store.postgres.sql import query

pytestmark = pytest.mark.integration

PARKED = 20_000
WAITING = 500
LIMIT = 100
PARK_ATTEMPTS = 1  # one refused publish parks a row: the fixture parks 20,000 in one release


@pytest.fixture(scope="module")
def parked_head(database_factory: Any) -> Iterator[tuple[str, PostgresStore]]:
    """20,000 parked rows due first, then 500 waiting rows due just after them."""
    url = database_factory.create_migrated()
    store = PostgresStore(url)
    now = store.ping()
    head = now - timedelta(minutes=10)
    for start in range(0, PARKED, 2_000):
        store.enqueue(
            [
                ScheduledMessage(f"p{i:06d}", now + timedelta(hours=1), None, b"x" * 64, [])
                for i in range(start, start + 2_000)
            ],
            0,
        )
    with psycopg.connect(url, autocommit=True) as conn:  # due at once, ahead of everything
        conn.execute("UPDATE chronos_messages SET deadline = %s", (head,))
    me = str(uuid.uuid4())
    rows = store.claim(me, 0, PARKED, PARK_ATTEMPTS)
    assert len(rows) == PARKED
    claims = [(r.id, r.readied_at) for r in rows]
    released = store.release(
        me, claims, failed=True, errors=["refused"] * PARKED, park_attempts=PARK_ATTEMPTS
    )
    assert len(released) == PARKED
    store.enqueue(
        [
            ScheduledMessage(f"w{i:06d}", now + timedelta(hours=1), None, b"x" * 64, [])
            for i in range(WAITING)
        ],
        0,
    )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE chronos_messages SET deadline = %s WHERE id LIKE 'w%%'",
            (head + timedelta(minutes=1),),
        )
        # As autovacuum would: the dead index entries of the updates above are gone; the parked
        # rows are live, and stay in any index whose predicate they match.
        conn.execute("VACUUM chronos_messages")
    yield url, store
    store.close()
    database_factory.drop(url)


def explain_claim(url: str, analyze: bool) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of claim_due as the store runs it (rolled back)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    statement = re.sub(r"%\((\w+)\)[sb]", number, query("claim_due").strip().rstrip(";"))
    params = {
        "node_id": str(uuid.uuid4()),
        "horizon_ms": 0,
        "limit": LIMIT,
        "park_attempts": PARK_ATTEMPTS,
        "max_bytes": 2**40,
        "first_always": True,
        "paused_tenants": [],
        "paused_topics": [],
        "max_lateness_ms": None,
        "catchup_after_ms": None,
        "catchup_limit": 0,
    }
    with psycopg.connect(
        url, autocommit=True, options=session_options(url), cursor_factory=psycopg.ClientCursor
    ) as conn:
        if analyze:
            conn.execute("ANALYZE chronos_messages")
        # The statement is the trusted text of the named SQL; only the arguments are composed.
        conn.execute(sql.SQL("PREPARE claim AS ") + sql.SQL(statement))
        conn.execute("BEGIN")
        args = sql.SQL(", ").join(sql.Literal(params[n]) for n in names)
        rows = conn.execute(
            sql.SQL("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE claim({})").format(args)
        ).fetchall()
        conn.execute("ROLLBACK")
    return "\n".join(r[0] for r in rows)


def scan_buffers(plan: str) -> int:
    """Shared buffers the claim's scan of the due rows touched (hit + read)."""
    scan = re.search(
        r"Scan[^\n]* on chronos_messages \(actual[^\n]*\n(?:[^\n]*\n)*?"
        r"\s*Buffers: shared ([^\n]+)",
        plan,
    )
    assert scan is not None, plan
    return sum(int(n) for n in re.findall(r"(?:hit|read)=(\d+)", scan[1]))


@pytest.mark.parametrize("analyze", [False, True], ids=["never-analyzed", "analyzed"])
def test_the_claim_does_not_walk_over_parked_rows(
    parked_head: tuple[str, PostgresStore], analyze: bool
) -> None:
    url, _ = parked_head
    plan = explain_claim(url, analyze)
    assert re.search(r"Update on chronos_messages m \(actual [^)]*rows=100(\.00)? ", plan), plan
    removed = sum(int(n) for n in re.findall(r"Rows Removed by [\w ]+: (\d+)", plan))
    assert removed == 0, plan  # it was 20,000: every parked row, read and thrown away
    assert scan_buffers(plan) < 100, plan  # it was ~370 (the pages of 20,000 rows)
    assert "chronos_messages_ready_idx" in plan, plan


def test_parked_rows_are_parked_for_the_admin_queries(
    parked_head: tuple[str, PostgresStore],
) -> None:
    _, store = parked_head
    backlog = store.backlog(10 * PARK_ATTEMPTS, count_limit=100_000)
    assert (backlog.parked, backlog.overdue) == (PARKED, WAITING)
    waiting = store.list_messages(state="waiting", park_attempts=10, limit=5)
    assert [m.id for m in waiting] == [f"w{i:06d}" for i in range(5)]
    parked = store.list_messages(state="parked", park_attempts=10, limit=5)
    assert [m.state(10) for m in parked] == ["parked"] * 5
