"""What the history of ended messages costs: its size per million records, a page of the admin
list of ended messages and a summary at N records, and the phase-2 statement with the history on
and off.

    python -m loadtest.probes.history_cost [--rows 1000000] [--runs 10] [--batches 20]
                                           [--default-share 0.0]

On a scratch Postgres (``loadtest.probes.scratch``, durable) it creates the history's daily
partitions over the last 7 days (``maintain_history``, as the leader does) and fills
``chronos_history`` in SQL (``generate_series``) with ``--rows`` records ended over those days:
1,000 tenants (``--default-share``: that share of them the default tenant, ''), 96 % fired (12
partitions, lateness 0-20 ms), 2 % expired, 1 % dead-lettered, 1 % cancelled, keyed by 100,000
customers (``customer-000042``: a key's records spread over the week); then analyzes it. It
prints the table's size (heap and each index, summed over the partitions) per million records;
for each admin query (a page of 101 records, as the API asks, by state, by tenant (a named one,
and the default one), by id prefix, by key exact or by prefix, deep in the cursor; a message's
records by id; the summary of the last hour) the median and worst of ``--runs`` calls through
``PostgresStore`` (prepared statements, as a node runs them); last, the Postgres CPU a message
costs over its life (its batch of 2,000 enqueued, claimed, and deleted as fired with its history
entries), with the history on, off, and on with fired messages not recorded
(CHRONOS_HISTORY_FIRED=false), ``--batches`` batches each, in turns: the CPU of every process of
the server (``psutil``), per statement and in all.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psutil
import psycopg

from chronos.protocol import ScheduledMessage
from chronos.store import Ending, MessageFilter, PostgresStore
from chronos.store.history import FIRED
from loadtest.probes.scratch import run_sql, scratch_postgres, server_now

PAGE = 101
BATCH = 2_000
FILL = """
INSERT INTO chronos_history (id, tenant, outcome, deadline, ended_at, topic, kafka_partition,
                             kafka_offset, lateness_ms, node, attempt, reason, ended_by,
                             message_key)
SELECT 'order-' || lpad(g::text, 9, '0'),
       CASE WHEN g %% 1000 < %(default_per_mille)s THEN ''
            ELSE 't' || lpad((g %% 1000)::text, 4, '0') END,
       CASE WHEN g %% 100 < 96 THEN 'fired' WHEN g %% 100 < 98 THEN 'expired'
            WHEN g %% 100 = 98 THEN 'dead-lettered' ELSE 'cancelled' END,
       d, d + (g %% 21) * interval '1 millisecond',
       CASE WHEN g %% 100 < 96 THEN 'orders' WHEN g %% 100 < 99 THEN 'chronos-dlq' END,
       CASE WHEN g %% 100 < 99 THEN g %% 12 END,
       CASE WHEN g %% 100 < 99 THEN g END,
       g %% 21,
       '00000000-0000-0000-0000-000000000001'::uuid, 1,
       CASE WHEN g %% 100 = 98 THEN 'publish_failed' WHEN g %% 100 IN (96, 97) THEN 'expired' END,
       CASE WHEN g %% 100 = 99 THEN 'kafka' END,
       convert_to('customer-' || lpad((g %% 100000)::text, 6, '0'), 'UTF8')
FROM (SELECT g, %(start)s::timestamptz + (g::float8 / %(rows)s) * %(span)s * interval '1 second'
             AS d
      FROM generate_series(0, %(rows)s - 1) g) s;
ANALYZE chronos_history;
"""
SIZES = """
SELECT c.relname, sum(pg_relation_size(t.relid))::bigint AS heap,
       sum(pg_indexes_size(t.relid))::bigint AS indexes,
       sum(pg_total_relation_size(t.relid))::bigint AS total
FROM pg_partition_tree('chronos_history') t
JOIN pg_class c ON c.oid = 'chronos_history'::regclass
WHERE t.isleaf
GROUP BY c.relname
"""
INDEX_SIZES = """
SELECT pi.relname AS parent, sum(pg_relation_size(ci.oid))::bigint AS bytes
FROM pg_partition_tree('chronos_history') t
JOIN pg_index i ON i.indrelid = t.relid
JOIN pg_class ci ON ci.oid = i.indexrelid
JOIN pg_inherits h ON h.inhrelid = ci.oid
JOIN pg_class pi ON pi.oid = h.inhparent
WHERE t.isleaf
GROUP BY pi.relname
ORDER BY pi.relname
"""


def timed(call: Callable[[], Any], runs: int) -> tuple[float, float]:
    """Median and worst milliseconds of ``runs`` calls (after one warm-up)."""
    call()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), max(times)


def server_cpu(server: psutil.Process) -> float:
    """CPU seconds of the Postgres server so far: the postmaster and every process it runs
    (backends, WAL writer, background writer, checkpointer)."""
    total = 0.0
    for process in [server, *server.children()]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


MODES = ("off", "on", "fired not recorded")


def lifecycle(store: PostgresStore, server: psutil.Process, mode: str) -> dict[str, float]:
    """One batch's whole life in the store: BATCH messages enqueued, claimed, fired and deleted
    (with their history records when ``mode`` is on; none, the history on, when it is "fired not
    recorded", as ``chronos.firing.history.endings`` gives them), as the loops run the
    statements: the server's CPU seconds of each statement."""
    store.history = mode != "off"
    me = str(uuid.uuid4())
    due = server_now_of(store) + timedelta(seconds=2)  # stored, however long the enqueue takes
    prefix = uuid.uuid4().hex[:8]
    messages = [
        ScheduledMessage(f"{prefix}-{i}", due, b"k", b"\xab" * 100, [("trace", b"1")])
        for i in range(BATCH)
    ]
    cpu: dict[str, float] = {}
    before = server_cpu(server)
    store.enqueue(messages, 0)
    cpu["enqueue"] = server_cpu(server) - before
    before = server_cpu(server)
    rows = store.claim(me, 10_000, BATCH, 5)  # due within the horizon: claimed at once
    cpu["claim"] = server_cpu(server) - before
    assert len(rows) == BATCH, len(rows)
    ends: list[Ending | None] = [
        None if mode == "fired not recorded" else Ending(FIRED, "orders", i % 12, i, i % 20, None)
        for i in range(len(rows))
    ]
    before = server_cpu(server)
    done = store.delete_fired(me, [(r.id, r.readied_at) for r in rows], None, ends)
    cpu["delete"] = server_cpu(server) - before
    assert len(done) == BATCH
    return cpu


def server_now_of(store: PostgresStore) -> datetime:
    return store.ping()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument(
        "--default-share",
        type=float,
        default=0.0,
        help="share of the records of the default tenant ('', no tenant header), from 0 to 1",
    )
    args = parser.parse_args()
    if not 0 <= args.default_share <= 1:
        parser.error("--default-share: a share from 0 to 1")
    default_per_mille = round(args.default_share * 1000)
    with scratch_postgres("history-cost") as url:
        store = PostgresStore(url)
        now = server_now(url)
        for days_back in range(7, -1, -1):  # the leader's partitions over the last week
            store.maintain_history(timedelta(days=7), at=now - timedelta(days=days_back))
        t0 = time.perf_counter()
        span = timedelta(days=7) - timedelta(minutes=1)
        run_sql(
            url,
            FILL,
            {
                "rows": args.rows,
                "start": now - span,
                "span": span.total_seconds(),
                "default_per_mille": default_per_mille,
            },
        )
        print(f"filled {args.rows:,} records in {time.perf_counter() - t0:.0f} s")
        with psycopg.connect(url, autocommit=True) as conn:
            _, heap, indexes, total = conn.execute(SIZES).fetchone() or (None, 0, 0, 0)
            per_million = 1_000_000 / args.rows
            print(
                f"size per million records: {total * per_million / 2**20:.0f} MiB "
                f"(heap {heap * per_million / 2**20:.0f} MiB, "
                f"indexes {indexes * per_million / 2**20:.0f} MiB)"
            )
            for name, size in conn.execute(INDEX_SIZES).fetchall():
                print(f"  {name}: {size * per_million / 2**20:.1f} MiB per million")
        middle = "order-" + str(args.rows // 2).zfill(9)
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT deadline FROM chronos_history WHERE id = %s", (middle,)
            ).fetchone()
        assert row is not None
        deep = (row[0], middle)
        queries: dict[str, Callable[[], Any]] = {
            "get by id": lambda: store.ended_messages(middle),
            "page: fired": lambda: store.find_ended(MessageFilter(state="fired"), limit=PAGE),
            "page: fired, deep cursor": lambda: store.find_ended(
                MessageFilter(state="fired"), limit=PAGE, after=deep
            ),
            "page: any ended": lambda: store.find_ended(MessageFilter(state="ended"), limit=PAGE),
            "page: dead-lettered of a tenant": lambda: store.find_ended(
                MessageFilter(state="dead-lettered", tenant="t0998"), limit=PAGE
            ),
            "page: fired, id prefix": lambda: store.find_ended(
                MessageFilter(state="fired", id_prefix="order-0000123"), limit=PAGE
            ),
            "page: a key, any ended state": lambda: store.find_ended(
                MessageFilter(state="ended", key=b"customer-012345"), limit=PAGE
            ),
            "page: fired, a key prefix": lambda: store.find_ended(
                MessageFilter(state="fired", key=b"customer-0123", key_prefix=True), limit=PAGE
            ),
            "page: fired, the default tenant": lambda: store.find_ended(
                MessageFilter(state="fired", tenant=""), limit=PAGE
            ),
            "summary: last hour": lambda: store.summarize_history(now - timedelta(hours=1)),
            "summary: last hour, a tenant": lambda: store.summarize_history(
                now - timedelta(hours=1), tenant="t0999"
            ),
        }
        print(f"\nat {args.rows:,} records (median / worst of {args.runs}, ms):")
        for name, call in queries.items():
            median, worst = timed(call, args.runs)
            print(f"  {name:34} {median:8.1f} {worst:8.1f}")
        with psycopg.connect(url, autocommit=True) as conn:  # its backend's parent: the server
            server = psutil.Process(conn.info.backend_pid).parent()
        assert server is not None
        spent = {mode: {"enqueue": 0.0, "claim": 0.0, "delete": 0.0} for mode in MODES}
        for i in range(args.batches * len(MODES)):
            mode = MODES[i % len(MODES)]
            for name, seconds in lifecycle(store, server, mode).items():
                spent[mode][name] += seconds
        messages = args.batches * BATCH
        print(f"\nPostgres CPU per message over a message's life ({args.batches} batches of")
        print(f"{BATCH:,} each way, in turns; all server processes), µs:")
        off = max(sum(spent["off"].values()), 1e-9)
        for mode in MODES:
            parts = spent[mode]
            line = ", ".join(f"{k} {v / messages * 1e6:.1f}" for k, v in parts.items())
            total = sum(parts.values()) / messages * 1e6
            ratio = sum(parts.values()) / off
            print(f"  history {mode:18}: {line}; total {total:.1f}; / off x{ratio:.2f}")
        store.close()


if __name__ == "__main__":
    main()
