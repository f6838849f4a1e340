"""The fair claim is index-driven whatever the statistics.

A first fair claim found the tenants by a skip scan inside the claim: on a table never analyzed
the planner walked the deadline index instead, and its cost grew with every tenant holding rows.
``claim_due_fair`` visits a bounded window of known tenants (``chronos_tenants``), each with
LIMIT-ed probes of the (tenant, deadline) ready index. Here a flood of one tenant is due first
and 400 small tenants after it, 90 idle tenants have rows due only in two hours, and so has
everyone; the statement's plan,
custom and generic, on the table never analyzed and analyzed (the flood skews the tenant column),
reads no row it throws away beyond the batch it takes, never scans the table, and the claim gives
every small tenant its share. The plain claim keeps its plan (``test_parked_rows.py``).
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
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

FLOOD = 60_000
TENANTS = 400
IDLE_TENANTS = 90  # known, with rows due only later
PER_TENANT = 20
LATER = 20_000  # rows due in two hours, of the flood and of the small tenants
LIMIT = 2_000
HORIZON_MS = 20 * 60 * 1000  # every row due in DUE_IN stays claimable however long filling takes
DUE_IN = timedelta(minutes=10)


def _message(i: str, deadline: Any, tenant: str) -> ScheduledMessage:
    return ScheduledMessage(i, deadline, None, b"x" * 64, [], tenant=tenant)


@pytest.fixture(scope="module")
def flooded(database_factory: Any) -> Iterator[str]:
    url = database_factory.create_migrated()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE chronos_messages SET (autovacuum_enabled = false)")
    store = PostgresStore(url)
    due = store.ping() + DUE_IN
    rows = [_message(f"f{i:06d}", due, "flood") for i in range(FLOOD)]
    rows += [
        _message(f"t{t:03d}-{i:02d}", due + timedelta(seconds=1 + i), f"t{t:03d}")
        for t in range(TENANTS)
        for i in range(PER_TENANT)
    ]
    later = due + timedelta(hours=2)
    # Tenants with rows but none due: their probes must not walk the due flood to find out.
    rows += [_message(f"i{t:03d}", later, f"i{t:03d}") for t in range(IDLE_TENANTS)]
    rows += [
        _message(f"l{i:06d}", later, "flood" if i % 2 else f"t{i % TENANTS:03d}")
        for i in range(LATER)
    ]
    for start in range(0, len(rows), 5_000):
        store.enqueue(rows[start : start + 5_000], 0)
    store.close()
    yield url
    database_factory.drop(url)


def explain(url: str, name: str, params: dict[str, Any], analyze: bool, generic: bool) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of a named statement as the store runs it (rolled back)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    statement = re.sub(r"%\((\w+)\)s", number, query(name).strip().rstrip(";"))
    with psycopg.connect(
        url, autocommit=True, options=session_options(url), cursor_factory=psycopg.ClientCursor
    ) as conn:
        if analyze:
            conn.execute("ANALYZE chronos_messages")
            conn.execute("ANALYZE chronos_tenants")
        mode = "force_generic_plan" if generic else "force_custom_plan"
        conn.execute(sql.SQL("SET plan_cache_mode = {}").format(sql.Literal(mode)))
        # The statement is the trusted text of the named SQL; only the arguments are composed.
        conn.execute(sql.SQL("PREPARE claim AS ") + sql.SQL(statement))
        conn.execute("BEGIN")
        args = sql.SQL(", ").join(sql.Literal(params[n]) for n in names)
        rows = conn.execute(
            sql.SQL("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE claim({})").format(args)
        ).fetchall()
        conn.execute("ROLLBACK")
    return "\n".join(r[0] for r in rows)


def fair_params(fill: bool = True, exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "node_id": str(uuid.uuid4()),
        "horizon_ms": HORIZON_MS,
        "limit": LIMIT,
        "park_attempts": 10,
        "max_bytes": 2**40,
        "first_always": True,
        "cursor": "",
        "tenants": 500,  # every known tenant: 400 small, 90 idle, the flood and ''
        "exclude_tenants": list(exclude),
        "fill": fill,
        "paused_tenants": [],
        "paused_topics": [],
        "max_lateness_ms": None,
        "catchup_after_ms": None,
        "catchup_limit": 0,
    }


def rows_thrown_away(plan: str) -> int:
    """Rows of chronos_messages the plan's scans read and threw away (filters)."""
    nodes = re.split(r"\n\s*->", plan)
    return sum(
        int(n)
        for node in nodes
        if " on chronos_messages " in node.split("\n")[0]
        for n in re.findall(r"Rows Removed by [\w ]+: (\d+)", node)
    )


def total_buffers(plan: str) -> int:
    """Shared buffers the whole statement touched (hit + read), from its top node."""
    top = re.search(r"Buffers: shared ([^\n]+)", plan)
    assert top is not None, plan
    return sum(int(n) for n in re.findall(r"(?:hit|read|dirtied|written)=(\d+)", top[1]))


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
@pytest.mark.parametrize("analyze", [False, True], ids=["never-analyzed", "analyzed"])
def test_the_fair_claim_is_index_driven(flooded: str, analyze: bool, generic: bool) -> None:
    plan = explain(flooded, "claim_due_fair", fair_params(), analyze, generic)
    assert re.search(
        r"Update on chronos_messages m(?:_\d+)? \(actual [^)]*rows=2000(\.00)? ", plan
    ), plan
    assert "Seq Scan on chronos_messages" not in plan, plan
    assert "chronos_messages_tenant_ready_idx" in plan, plan
    # The fill meets at most the rows the visits already took; nothing else is read and dropped.
    assert rows_thrown_away(plan) <= LIMIT, plan
    # ... and tells them apart by a hashed subplan, one probe a row (an array of their ids
    # compared element by element cost the claim a third more at a flood's share of 1,000).
    assert re.search(r"NOT \(ANY \(\(id\)::text = \(\(hashed SubPlan \d+\)", plan), plan
    # ~3 pages per probe of 400 tenants and the 2,000 rows updated; the table has ~2,000 pages.
    assert total_buffers(plan) < 40_000, plan


@pytest.mark.parametrize("analyze", [False, True], ids=["never-analyzed", "analyzed"])
def test_with_the_flood_excluded_nothing_of_it_is_read(flooded: str, analyze: bool) -> None:
    plan = explain(flooded, "claim_due_fair", fair_params(False, ("flood",)), analyze, False)
    claimed = TENANTS * (LIMIT // TENANTS)
    assert re.search(
        rf"Update on chronos_messages m(?:_\d+)? \(actual [^)]*rows={claimed}\b", plan
    ), plan
    assert "Seq Scan on chronos_messages" not in plan, plan
    assert rows_thrown_away(plan) == 0, plan


def test_every_small_tenant_gets_its_share_of_one_claim(flooded: str) -> None:
    store = PostgresStore(flooded)
    try:
        me = str(uuid.uuid4())
        rows = store.claim(me, HORIZON_MS, LIMIT, 10, fair=True)
        by_tenant = Counter(r.tenant for r in rows)
        share = LIMIT // (TENANTS + 1)
        assert len(rows) == LIMIT
        assert all(by_tenant[f"t{t:03d}"] == share for t in range(TENANTS)), by_tenant
        assert by_tenant["flood"] == LIMIT - TENANTS * share  # its share, then the fill
        plain = store.claim(me, HORIZON_MS, LIMIT, 10)
        assert {r.tenant for r in plain} == {"flood"}  # oldest first: the flood's rows
        store.release(me, [(r.id, r.readied_at) for r in rows + plain], failed=False)
    finally:
        store.close()


@pytest.fixture(scope="module")
def few_tenants(database_factory: Any) -> Iterator[str]:
    """The flood due at one instant; 20 small tenants whose rows are due only later."""
    url = database_factory.create_migrated()
    store = PostgresStore(url)
    due = store.ping() + DUE_IN
    rows = [_message(f"f{i:06d}", due, "flood") for i in range(FLOOD)]
    rows += [
        _message(f"s{t:02d}-{i}", due + timedelta(hours=1), f"s{t:02d}")
        for t in range(20)
        for i in range(10)
    ]
    for start in range(0, len(rows), 5_000):
        store.enqueue(rows[start : start + 5_000], 0)
    store.close()
    yield url
    database_factory.drop(url)


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
@pytest.mark.parametrize("analyzed", [False, True], ids=["never-analyzed", "analyzed"])
def test_a_tenant_with_nothing_due_costs_one_probe_whatever_the_flood(
    few_tenants: str, analyzed: bool, generic: bool
) -> None:
    """With few tenants the planner reckons a tenant's rows are common: it once probed each one
    by walking the deadline index over the due flood, filtering on the tenant (60,000 rows read
    and dropped per idle tenant, seconds a claim)."""
    plan = explain(few_tenants, "claim_due_fair", fair_params(), analyzed, generic)
    assert "Seq Scan on chronos_messages" not in plan, plan
    assert rows_thrown_away(plan) <= LIMIT, plan
