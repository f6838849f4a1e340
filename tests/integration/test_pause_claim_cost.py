"""The cost of pauses in the claim, measured on 100,000 due rows of 10 tenants: with nothing
paused the claim keeps its plan (the ready index, nothing thrown away); with a tenant paused it
still walks the ready index, throwing away the paused rows it passes: none for a tenant whose
rows come after the batch, every row of a paused flood due ahead of the rest.
Run with ``-s`` to see the timings (median of 20 claims of 100 rows, each rolled back)."""

from __future__ import annotations

import re
import statistics
import time
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

ROWS = 100_000
TENANTS = 10
FLOOD = 10_000  # rows of tenant "flood", due ahead of every other
LIMIT = 100


@pytest.fixture(scope="module")
def due_rows(database_factory: Any) -> Iterator[str]:
    url = database_factory.create_migrated()
    store = PostgresStore(url)
    later = store.ping() + timedelta(hours=1)
    batch = [
        ScheduledMessage(f"m{i:06d}", later, None, b"x" * 64, [], tenant=f"t{i % TENANTS}")
        for i in range(ROWS)
    ]
    batch += [
        ScheduledMessage(f"f{i:06d}", later, None, b"x" * 64, [], tenant="flood")
        for i in range(FLOOD)
    ]
    for start in range(0, len(batch), 5_000):
        store.enqueue(batch[start : start + 5_000], 0)
    with psycopg.connect(url, autocommit=True) as conn:  # all due, the flood first
        conn.execute(
            "UPDATE chronos_messages SET deadline = now() - interval '10 minutes'"
            " + make_interval(secs => CASE WHEN id LIKE 'f%%' THEN 0 ELSE 60 END"
            " + substring(id from 2)::int / 100000.0)"
        )
        conn.execute("VACUUM ANALYZE chronos_messages")
    store.close()
    yield url
    database_factory.drop(url)


def run_claim(url: str, paused: list[str], runs: int = 20) -> tuple[str, float]:
    """EXPLAIN (ANALYZE, BUFFERS) of one claim_due, and the median time of ``runs`` (rolled
    back), with ``paused`` tenants."""
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
        "park_attempts": 10,
        "max_bytes": 2**40,
        "first_always": True,
        "paused_tenants": paused,
        "paused_topics": [],
        "max_lateness_ms": None,
        "catchup_after_ms": None,
        "catchup_limit": 0,
    }
    with psycopg.connect(
        url, autocommit=True, options=session_options(url), cursor_factory=psycopg.ClientCursor
    ) as conn:
        conn.execute(sql.SQL("PREPARE claim AS ") + sql.SQL(statement))
        args = sql.SQL(", ").join(sql.Literal(params[n]) for n in names)
        timings = []
        for _ in range(runs):
            conn.execute("BEGIN")
            t0 = time.perf_counter()
            conn.execute(sql.SQL("EXECUTE claim({})").format(args)).fetchall()
            timings.append(time.perf_counter() - t0)
            conn.execute("ROLLBACK")
        conn.execute("BEGIN")
        rows = conn.execute(
            sql.SQL("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE claim({})").format(args)
        ).fetchall()
        conn.execute("ROLLBACK")
    return "\n".join(r[0] for r in rows), statistics.median(timings)


def removed(plan: str) -> int:
    return sum(int(n) for n in re.findall(r"Rows Removed by [\w ]+: (\d+)", plan))


def test_the_claim_with_nothing_paused_keeps_its_plan(due_rows: str) -> None:
    plan, median = run_claim(due_rows, [])
    print(f"\nclaim of {LIMIT}, nothing paused: {median * 1000:.2f} ms")
    assert "chronos_messages_ready_idx" in plan, plan
    assert removed(plan) == 0, plan


def test_a_paused_tenant_costs_the_rows_the_claim_passes(due_rows: str) -> None:
    plan, median = run_claim(due_rows, ["t3"])
    print(f"\nclaim of {LIMIT}, a tenant not at the head paused: {median * 1000:.2f} ms")
    assert "chronos_messages_ready_idx" in plan, plan
    # the flood's 100 rows first (none paused), so nothing of t3 is passed
    assert removed(plan) == 0, plan
    plan, median = run_claim(due_rows, ["flood"])
    print(f"claim of {LIMIT}, a paused flood of {FLOOD} due first: {median * 1000:.2f} ms")
    assert "chronos_messages_ready_idx" in plan, plan
    assert removed(plan) == FLOOD, plan  # every paused row ahead of the claimable ones
