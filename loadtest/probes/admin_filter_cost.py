"""What the admin list, its count and the bulk actions cost at N rows, and what their indexes
cost per message: run it after a change to ``find_messages``, ``count_messages``, ``bulk_*`` or
the indexes of migration 0008.

    python -m loadtest.probes.admin_filter_cost [--rows 1000000] [--runs 10] [--extra 100000]

On a scratch Postgres (``loadtest.probes.scratch``, durable) it fills ``chronos_messages`` in SQL
(``generate_series``) with ``--rows`` rows: 1,000 tenants, 1 % with a target topic of their own
(10 topics), keys ``user:<g mod 200,000>``, 0.5 % series, deadlines spread at random over 30
days, 0.01 % claimed and 0.01 % parked; then analyzes it. For each filter it prints one
execution of a page (101 rows, as the API asks) under ``EXPLAIN (ANALYZE, BUFFERS)`` (the index
it walked, the buffers it read) and the median and worst of ``--runs`` calls through
``PostgresStore`` (prepared statements, as a node runs them); the same for the count (stopping
at 10,000) and one batch (1,000 rows) of the bulk cancel and reschedule (in a transaction rolled
back, so every filter sees the same table). Last, the new indexes' cost per message: their size
over the rows, and the time and WAL of inserting ``--extra`` rows with them and without them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any, LiteralString

import psycopg

from chronos.store import BULK_BATCH, COUNT_LIMIT, MessageFilter, PostgresStore
from chronos.store.postgres.sql import query
from loadtest.probes.scratch import KNOWN_TENANTS, row_count, run_sql, scratch_postgres, server_now

PARK = 4
PAGE = 101  # the API asks one row more than its limit (100)
MAX_BYTES = 4 * 1024 * 1024
NEW_INDEXES = (
    "chronos_messages_topic_ready_idx",
    "chronos_messages_id_ready_idx",
    "chronos_messages_key_ready_idx",
    "chronos_messages_recurring_ready_idx",
)
ROWS = """
SELECT %(prefix)s || lpad(g::text, 9, '0'),
       now() + interval '1 hour' + random() * interval '30 days',
       convert_to('user:' || (g %% 200000), 'UTF8'),
       decode(repeat('ab', 50), 'hex'),
       '[{"trace": "MQ=="}]'::jsonb,
       't' || lpad((g %% 1000)::text, 4, '0'),
       CASE WHEN g %% 100 = 0 THEN 'topic-' || (g / 100 %% 10) END,
       CASE WHEN g %% 200 = 7 THEN '{"every":60000}' END,
       CASE WHEN g %% 10000 = 1 THEN now() END,
       CASE WHEN g %% 10000 = 1 THEN '00000000-0000-0000-0000-000000000001'::uuid END,
       CASE WHEN g %% 10000 = 2 THEN 4 ELSE 0 END,
       CASE WHEN g %% 10000 = 2 THEN now() END
FROM generate_series(0, %(rows)s - 1) g
"""
COLUMNS = """
INSERT INTO chronos_messages (id, deadline, message_key, message_value, message_headers, tenant,
                              target_topic, recurrence, readied_at, readied_by, attempts,
                              parked_at)
"""
FILL: LiteralString = COLUMNS + ROWS + ";"
ANALYZE = "VACUUM ANALYZE chronos_messages;"


def filters(deadline_base: Any) -> dict[str, MessageFilter]:
    day = timedelta(days=1)
    return {
        "none (every state)": MessageFilter(),
        "state=waiting": MessageFilter(state="waiting"),
        "state=parked": MessageFilter(state="parked"),
        "state=claimed": MessageFilter(state="claimed"),
        "tenant (0.1 %)": MessageFilter(tenant="t0042"),
        "tenant + 1-day range": MessageFilter(
            tenant="t0042",
            deadline_from=deadline_base + 10 * day,
            deadline_to=deadline_base + 11 * day,
        ),
        "topic (0.1 %)": MessageFilter(topic="topic-3"),
        "output topic (99 %)": MessageFilter(topic="out", topic_unset=True),
        "id prefix (1,000 rows)": MessageFilter(id_prefix="m000123"),
        "key exact": MessageFilter(key=b"user:4242"),
        "key prefix": MessageFilter(key=b"user:42", key_prefix=True),
        "recurring": MessageFilter(recurring=True),
        "not recurring": MessageFilter(recurring=False),
        "1-day range": MessageFilter(
            deadline_from=deadline_base + 10 * day, deadline_to=deadline_base + 11 * day
        ),
        "tenant + key prefix": MessageFilter(tenant="t0042", key=b"user:1", key_prefix=True),
    }


def statement_params(where: MessageFilter, **extra: Any) -> dict[str, Any]:
    return {
        **where.params(),
        "after_deadline": None,
        "after_id": None,
        "park_attempts": PARK,
        **extra,
    }


def explain(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> tuple[float, str]:
    """One execution under EXPLAIN (ANALYZE, BUFFERS), rolled back: (ms, the plan's outline)."""
    statement: LiteralString = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query(name)
    with conn.transaction(force_rollback=True):
        row = conn.execute(statement, params).fetchone()
    assert row is not None
    doc = row[0]
    plan = (doc if isinstance(doc, list) else json.loads(str(doc)))[0]
    return float(plan["Execution Time"]), outline(plan["Plan"])


def outline(node: dict[str, Any]) -> str:
    """The index scans of a plan, with their rows and shared buffers read."""
    found: list[str] = []

    def walk(n: dict[str, Any]) -> None:
        if "Index Name" in n:
            found.append(
                f"{n['Index Name'].removeprefix('chronos_messages_')}:{n.get('Actual Rows', 0)}"
            )
        if n.get("Node Type") == "Seq Scan":
            found.append(f"SEQ:{n.get('Actual Rows', 0)}")
        for child in n.get("Plans", []):
            walk(child)

    walk(node)
    hit = node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)
    return f"{' '.join(found)} buf={hit}"


def timed(call: Callable[[], object], runs: int) -> tuple[float, float]:
    series = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        series.append((time.perf_counter() - started) * 1000)
    return statistics.median(series), max(series)


def index_costs(url: str, rows: int, extra: int) -> list[str]:
    lines = []
    with psycopg.connect(url, autocommit=True) as conn:
        for name in NEW_INDEXES:
            (size,) = conn.execute("SELECT pg_relation_size(%s::regclass)", (name,)).fetchone() or (
                0,
            )
            lines.append(f"{name:<40} {size / 1e6:8.1f} MB  {size / rows:6.1f} bytes/message")
        definitions = [
            str((conn.execute("SELECT pg_get_indexdef(%s::regclass)", (n,)).fetchone() or ("",))[0])
            for n in NEW_INDEXES
        ]
        measured = {}
        for label in ("with the new indexes", "without them"):
            conn.execute("CHECKPOINT")
            (before,) = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone() or (None,)
            started = time.perf_counter()
            conn.execute(COLUMNS + ROWS, {"prefix": "x", "rows": extra})
            seconds = time.perf_counter() - started
            (wal,) = conn.execute(
                "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), %s)", (before,)
            ).fetchone() or (0,)
            measured[label] = (seconds, float(wal))
            conn.execute("DELETE FROM chronos_messages WHERE id LIKE 'x%%'")
            conn.execute("VACUUM chronos_messages")
            if label == "with the new indexes":
                for name in NEW_INDEXES:
                    conn.execute(f"DROP INDEX {name}")  # the probe's own scratch database
        for label, (seconds, wal) in measured.items():
            lines.append(
                f"insert {extra:,} rows {label:<22} {seconds:6.2f} s  "
                f"{seconds / extra * 1e6:6.1f} us/message  {wal / extra:7.0f} WAL bytes/message"
            )
        (with_s, with_wal), (without_s, without_wal) = measured.values()
        lines.append(
            f"=> the new indexes cost {(with_s - without_s) / extra * 1e6:.1f} us and "
            f"{(with_wal - without_wal) / extra:.0f} WAL bytes per inserted message"
        )
        for definition in definitions:
            conn.execute(definition)  # restored
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes.admin_filter_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--extra", type=int, default=100_000)
    args = parser.parse_args()
    with scratch_postgres("admin-filters") as url:
        started = time.perf_counter()
        run_sql(url, FILL, {"prefix": "m", "rows": args.rows})
        run_sql(url, KNOWN_TENANTS)
        run_sql(url, ANALYZE)
        print(f"{row_count(url):,} rows filled in {time.perf_counter() - started:.0f} s")
        base = server_now(url) + timedelta(hours=1)
        store = PostgresStore(url)
        print(f"{'filter':<24} {'statement':<16} {'explain ms':>10} {'median ms':>10}", end="")
        print(f" {'worst ms':>9}  plan")
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                for label, where in filters(base).items():
                    page = statement_params(where, limit=PAGE, max_bytes=MAX_BYTES)
                    count = statement_params(where, count_limit=COUNT_LIMIT)
                    cases: list[tuple[str, dict[str, Any], Callable[[], object] | None]] = [
                        (
                            "find_messages",
                            page,
                            partial(
                                store.find_messages,
                                where,
                                park_attempts=PARK,
                                limit=PAGE,
                                max_bytes=MAX_BYTES,
                            ),
                        ),
                        (
                            "count_messages",
                            count,
                            partial(
                                store.count_messages,
                                where,
                                park_attempts=PARK,
                                count_limit=COUNT_LIMIT,
                            ),
                        ),
                    ]
                    if where.narrowed:
                        cases.append(
                            (
                                "bulk_cancel",
                                statement_params(where, batch=BULK_BATCH, cancel_ttl_ms=3_600_000),
                                None,
                            )
                        )
                        waiting = dataclasses.replace(where, state="waiting")
                        cases.append(
                            (
                                "bulk_reschedule",
                                statement_params(
                                    waiting,
                                    batch=BULK_BATCH,
                                    since=None,
                                    deadline=None,
                                    shift_ms=60_000,
                                    fire_now=False,
                                ),
                                None,
                            )
                        )
                    for name, params, call in cases:
                        ms, plan = explain(conn, name, params)
                        median, worst = timed(call, args.runs) if call else (float("nan"),) * 2
                        print(
                            f"{label:<24} {name:<16} {ms:10.1f} {median:10.1f} {worst:9.1f}  {plan}"
                        )
        finally:
            store.close()
        for line in index_costs(url, args.rows, args.extra):
            print(line)


if __name__ == "__main__":
    main()
