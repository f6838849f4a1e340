"""Hot statements on a large table never analyzed: their plans must drive the indexes whatever
plan Postgres picks (custom or generic), so a backlog never stalls firing.

The table is filled through the store and never analyzed (autovacuum is off for it), as a
freshly filled table is until autovacuum gets to it.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from chronos.protocol import ScheduledMessage
from chronos.store import PostgresStore, statement_params
from chronos.store.postgres.sql import query

pytestmark = pytest.mark.integration

ROWS = 100_000
BATCH = 2_000
# The rows are due in DUE_IN, and claimed with a horizon beyond it: every row stays claimable
# however long filling the table takes (rows already due at enqueue are published directly, not
# stored, so a deadline that passes while filling would leave the table short of rows).
DUE_IN = timedelta(minutes=10)
HORIZON_MS = 20 * 60 * 1000


@pytest.fixture(scope="module")
def filled(database_factory: Any) -> Iterator[tuple[str, PostgresStore]]:
    url = database_factory.create_migrated()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE chronos_messages SET (autovacuum_enabled = false)")
    store = PostgresStore(url)
    due = store.ping() + DUE_IN
    for start in range(0, ROWS, BATCH):
        batch = [
            ScheduledMessage(f"m{i:07d}", due, None, b"x" * 64, [])
            for i in range(start, start + BATCH)
        ]
        store.enqueue(batch, 0)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM chronos_messages").fetchone() == (ROWS,)
    yield url, store
    store.close()
    database_factory.drop(url)


def _prepared(name: str) -> tuple[str, list[str]]:
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"

    return re.sub(r"%\((\w+)\)[sb]", number, query(name).strip().rstrip(";")), names


def _generic_plan(url: str, name: str, params: dict[str, Any]) -> tuple[str, float]:
    """EXPLAIN ANALYZE of the statement's generic plan (rolled back), and its duration."""
    statement, names = _prepared(name)
    with psycopg.connect(url, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        # The statement is the trusted text of the named SQL; only the name is composed.
        conn.execute(sql.SQL("PREPARE hot AS ") + sql.SQL(statement))
        conn.execute("BEGIN")
        args = sql.SQL(", ").join(sql.Literal(params[n]) for n in names)
        started = time.perf_counter()
        rows = conn.execute(
            sql.SQL("EXPLAIN (ANALYZE, COSTS OFF) EXECUTE hot({})").format(args)
        ).fetchall()
        elapsed = time.perf_counter() - started
        conn.execute("ROLLBACK")
    return "\n".join(r[0] for r in rows), elapsed


def _claim_a_batch(store: PostgresStore) -> tuple[str, list[tuple[str, Any]]]:
    """A new node id and the claims of the BATCH rows it claimed."""
    node_id = str(uuid.uuid4())
    rows = store.claim(node_id, HORIZON_MS, BATCH, 10)
    assert len(rows) == BATCH
    return node_id, [(r.id, r.readied_at) for r in rows]


def _rows_examined(plan: str) -> int:
    """Rows a plan read and threw away (filters, join filters)."""
    return sum(int(n) for n in re.findall(r"Rows Removed by [\w ]+: (\d+)", plan))


def test_the_table_is_not_analyzed(filled: tuple[str, PostgresStore]) -> None:
    url, _ = filled
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables"
            " WHERE relname = 'chronos_messages'"
        ).fetchone()
    assert row == (None, None)


@pytest.mark.parametrize("name", ["delete_fired", "release_claims", "reset_stuck"])
def test_generic_plans_of_batch_writes_probe_the_primary_key(
    filled: tuple[str, PostgresStore], name: str
) -> None:
    url, store = filled
    node_id, claims = _claim_a_batch(store)
    try:
        params = statement_params(name, node_id, claims)
        plan, elapsed = _generic_plan(url, name, params)
        assert "chronos_messages_pkey" in plan, plan
        assert "Seq Scan on chronos_messages" not in plan, plan
        # Today's generic plan compared every row with every claim (BATCH x BATCH).
        assert _rows_examined(plan) <= BATCH, plan
        assert elapsed < 1.0, plan
    finally:
        store.release(node_id, claims, failed=False)


def _rows_read(url: str, store: PostgresStore) -> int:
    """Rows of chronos_messages read so far (sequential scans and index fetches). A backend
    sends its counts to the statistics when it ends (when idle, only every 10 s): the store's
    connections are closed, and the counts read once no other session of the database is left
    (the store reconnects at its next statement)."""
    store.close()
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(100):
            (others,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchone() or (0,)
            if others == 0:
                conn.execute("SELECT pg_stat_clear_snapshot()")
                (read,) = conn.execute(
                    "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)"
                    " FROM pg_stat_user_tables WHERE relname = 'chronos_messages'"
                ).fetchone() or (0,)
                return int(read)
            time.sleep(0.1)
    raise AssertionError("the database's other sessions never ended")


def test_repeated_batches_through_the_store_stay_on_the_key(
    filled: tuple[str, PostgresStore],
) -> None:
    """More than 5 executions of each statement (when Postgres may switch a prepared statement
    to its generic plan) through the store's own prepared statements: each reads about its own
    batch's rows, never the table or every row for every claim (the generic plan that compared
    BATCH x BATCH rows). Counted in rows read, not timed: a 2,000-row batch's time is the
    benchmark's to measure."""
    url, store = filled
    node_id = str(uuid.uuid4())
    before = _rows_read(url, store)
    rounds = 8
    for _ in range(rounds):
        rows = store.claim(node_id, HORIZON_MS, BATCH, 10)
        assert len(rows) == BATCH
        store.release(node_id, [(r.id, r.readied_at) for r in rows], failed=False)
    for _ in range(rounds):
        rows = store.claim(node_id, HORIZON_MS, BATCH, 10)
        assert len(rows) == BATCH
        assert len(store.delete_fired(node_id, [(r.id, r.readied_at) for r in rows])) == BATCH
    read = _rows_read(url, store) - before
    statements = 4 * rounds  # each round a claim and a release or a delete
    # Measured: 160,000 rows after the module's other tests (5,000 a statement: the versions
    # their claims left, never vacuumed here, are read again; the deletes, whose history record
    # finds no partition in this database, run twice). The bound: four batches a statement. A
    # table scan reads 100,000 rows a statement (3.2 million), the BATCH x BATCH plan four
    # million each.
    assert read >= rounds * BATCH, f"only {read} rows counted: are the statistics collected?"
    assert read <= statements * BATCH * 4, f"{read} rows read by {statements} statements"


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("find_stuck", {"hold_ms": 0, "own_node": None, "own_since": None, "limit": 1000}),
        ("release_node", {"since": None, "history": True}),
        ("reset_lapsed_claims", {"window_ms": 0, "limit": 1000, "history": True}),
    ],
)
def test_statements_reading_claimed_rows_read_an_index_of_claimed_rows(
    filled: tuple[str, PostgresStore], name: str, params: dict[str, Any]
) -> None:
    """The claimed rows are few beside the waiting ones: the statements that read them (by node,
    or all of them by age) read an index of claimed rows, never the table."""
    url, store = filled
    node_id, claims = _claim_a_batch(store)
    try:
        plan, elapsed = _generic_plan(url, name, {"node_id": node_id, **params})
        assert re.search(r"Index (Only )?Scan .*chronos_messages_claimed(_by)?_idx", plan), plan
        assert "Seq Scan on chronos_messages" not in plan, plan
        assert elapsed < 1.0, plan
    finally:
        store.release(node_id, claims, failed=False)


def _rows_fetched(plan: str) -> int:
    """Rows the plan's scans of chronos_messages returned, over all their loops."""
    scans = re.findall(
        r"Scan (?:using \S+ )?on chronos_messages \w+ \(actual time=\S+ rows=([\d.]+) loops=(\d+)",
        plan,
    )
    return round(sum(float(rows) * int(loops) for rows, loops in scans))


def test_a_lapsed_node_holding_nothing_costs_no_walk_of_the_claimed_rows(
    filled: tuple[str, PostgresStore],
) -> None:
    """The leader resets lapsed nodes' claims every round. A lapsed node's row stays until it is
    pruned; while it holds no claim, the round reads nothing, however many rows the live nodes
    hold (a burst's in-flight rows): it never walks every claimed row looking for the lapsed
    node's (a join over the claimed index did, on every round and every shard)."""
    url, store = filled
    live, claims = _claim_a_batch(store)
    stale, me = str(uuid.uuid4()), str(uuid.uuid4())
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO chronos_nodes (node_id, heartbeat_at)"
            " VALUES (%s, now()), (%s, now() - interval '1 hour')",
            (live, stale),
        )
    try:
        params = {"node_id": me, "window_ms": 20_000, "limit": 1000, "history": True}
        plan, _ = _generic_plan(url, "reset_lapsed_claims", params)
        assert "chronos_messages_claimed_by_idx" in plan, plan
        assert _rows_fetched(plan) == 0, plan
        # ...and once the live node lapses, its oldest claims are reset, up to the limit.
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "UPDATE chronos_nodes SET heartbeat_at = now() - interval '1 hour'"
                " WHERE node_id = %s",
                (live,),
            )
        plan, _ = _generic_plan(url, "reset_lapsed_claims", params)
        assert re.search(r"^Update on chronos_messages m \(actual time=\S+ rows=1000(\.00)? ", plan)
        assert "Seq Scan on chronos_messages" not in plan, plan
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DELETE FROM chronos_nodes WHERE node_id IN (%s, %s)", (live, stale))
        store.release(live, claims, failed=False)
