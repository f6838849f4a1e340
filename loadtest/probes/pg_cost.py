"""Where Postgres's CPU per message goes in a burst, by table size: run it after a change to the
enqueue, claim or delete statements, the table's indexes or storage parameters, or the batch
sizes, to see what each message costs the database and why.

    python -m loadtest.probes.pg_cost [--sizes 50000,1000000] [--preload 0] [--settle 10]
                                      [--out FILE]

On a scratch Postgres of its own (durable, as the benchmark runs it, with
``pg_stat_statements`` loaded and ``track_io_timing`` on), for each size N: an empty table
(plus ``--preload`` far-future rows that never come due, as the ``backlog`` scenario's), then
the node's own statements through ``PostgresStore`` with the node's batch sizes (its defaults,
or ``CHRONOS_CONSUME_BATCH_SIZE`` and ``CHRONOS_CLAIM_BATCH_SIZE`` from the environment):

- enqueue: N messages in consumed batches (``enqueue_batch``), all due at one instant, as the
  benchmark's ``burst`` sends them (a 100-byte value, a 10-byte key, one header);
- drain: claim (``claim_due``, or ``claim_due_fair`` with ``--fair``) and delete
  (``delete_fired``) batch after batch until nothing is left (the claim's horizon reaches past
  the deadline, so nothing waits for the clock);
- settle: ``--settle`` seconds doing nothing, for the autovacuum and checkpoints the phases
  left behind.

For every phase: Postgres's CPU (the postmaster's process tree, split by process kind: client
backends, autovacuum, checkpointer, WAL writer, background writer, and the exited ones the
postmaster reaped), per message; per statement, from ``pg_stat_statements``: execution time,
shared buffers hit, read, dirtied and written, WAL records, full-page images and bytes per
message; ``pg_stat_wal``, ``pg_stat_io`` (writes, extends and fsyncs by process kind),
``pg_stat_checkpointer`` and the table's tuple counters (inserts, updates and how many of them
HOT, deletes, autovacuums). In the middle of each phase one batch runs under
``EXPLAIN (ANALYZE, BUFFERS, WAL)`` instead (printed, and in ``--out``). The index sizes at the
end of the enqueue show what every message writes (the figures: ``pg_cost_figures``).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, LiteralString

import psycopg
from psycopg import sql

from chronos.config import settings as chronos_settings
from chronos.config.policy import park_after
from chronos.embedded import EmbeddedPostgres
from chronos.protocol import ScheduledMessage
from chronos.store import PostgresStore, migrate
from chronos.store.batch import encode_batch
from chronos.store.postgres.session import SESSION_SETTINGS
from chronos.store.postgres.sql import query
from chronos.store.postgres.store import statement_params
from loadtest.bench.pgstats import alter_system
from loadtest.probes.pg_cost_figures import (
    SizeResult,
    Snapshot,
    fetch_rows,
    flush_stats,
    phase,
    render,
    snapshot,
)

NODE_ID = "6f1c1e0e-0000-4000-8000-0000000000c0"
HORIZON_MS = 3 * 86_400_000  # past every deadline of the burst, short of the preloaded rows
PRELOAD_SQL = """
INSERT INTO chronos_messages (id, deadline, message_key, message_value, message_headers)
SELECT 'preload-' || g, now() + interval '7 days' + g * interval '1 millisecond',
       convert_to('key-' || (g %% 1000), 'UTF8'), %(value)s::bytea, '[{"trace": "MQ=="}]'::jsonb
FROM generate_series(1::bigint, %(rows)s::bigint) AS g
"""

INDEXES_SQL = """
SELECT indexrelname, pg_relation_size(indexrelid), idx_scan
FROM pg_stat_user_indexes WHERE relname = 'chronos_messages' ORDER BY indexrelname
"""
INDEX_DEFS_SQL = """
SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'chronos_messages' ORDER BY 1
"""
CLAIMED_SQL = """
SELECT id, readied_at FROM chronos_messages
WHERE readied_by = %(node)s::uuid AND readied_at IS NOT NULL
"""


def burst(
    size: int, deadline: datetime, batch: int, start: int
) -> Iterator[list[ScheduledMessage]]:
    """``size`` messages in consumed batches, all due at ``deadline``."""
    for first in range(start, start + size, batch):
        yield [
            ScheduledMessage(
                f"m{i:012d}", deadline, b"key-%06d" % (i % 1000), b"v" * 100, [("trace", b"1")]
            )
            for i in range(first, min(start + size, first + batch))
        ]


def explain(conn: psycopg.Connection[Any], name: LiteralString, params: Mapping[str, Any]) -> str:
    """One execution of a named query under EXPLAIN (ANALYZE, BUFFERS, WAL), committed."""
    statement: LiteralString = "EXPLAIN (ANALYZE, BUFFERS, WAL, TIMING OFF) " + query(name)
    with conn.transaction():
        rows = conn.execute(statement, params).fetchall()
    return "\n".join(str(r[0]) for r in rows)


def run_size(
    url: str, pid: int, size: int, preload: int, settle: float, settings: Any, fair: bool = False
) -> SizeResult:
    store = PostgresStore(url, application_name="chronos-pg-cost")
    explain_conn = psycopg.connect(url, autocommit=True, options=SESSION_SETTINGS)
    stats = psycopg.connect(url, autocommit=True)

    def finished() -> Snapshot:
        """The snapshot at the end of a phase, once the backends flushed their statistics
        (the phase's wall time ends before the wait)."""
        ended = time.monotonic()
        flush_stats(explain_conn)
        store.ping()
        return snapshot(stats, pid, ended)

    try:
        stats.execute("TRUNCATE chronos_messages")
        if preload:
            stats.execute(PRELOAD_SQL, {"rows": preload, "value": b"p" * 100})
        stats.execute("VACUUM (ANALYZE) chronos_messages")
        stats.execute("CHECKPOINT")
        result = SizeResult(size, preload)
        rows = preload + size
        advance = settings.timing_advance_ms
        batch, claim = settings.consume_batch_size, settings.claim_batch_size
        deadline = datetime.now(UTC) + timedelta(days=1)
        batches = list(burst(size, deadline, batch, 0))
        middle = len(batches) // 2
        before = snapshot(stats, pid)
        plan = ""
        for i, messages in enumerate(batches):
            if i == middle:
                params = encode_batch(messages) | {
                    "advance_ms": advance,
                    "cancel_ttl_ms": 86_400_000,
                    "new_tenants": [""],
                    "fenced": False,
                }
                plan = explain(explain_conn, "enqueue_batch", params)
            else:
                store.enqueue(messages, advance)
        after = finished()
        enqueue = phase("enqueue", rows, size, before, after)
        enqueue.explain = plan
        result.phases.append(enqueue)
        result.indexes = {str(n): int(b) for n, b, _ in fetch_rows(stats, INDEXES_SQL)}

        parks = park_after(settings)
        leader = leader_plans(store, explain_conn, settings, parks)
        flush_stats(explain_conn)  # the claims given back are not the drain's
        store.ping()
        before = snapshot(stats, pid)
        drained, claims = 0, 0
        plans: list[str] = [leader]
        while True:
            if claims == middle and len(plans) == 1:
                base = {"node_id": NODE_ID, "horizon_ms": HORIZON_MS, "limit": claim}
                params = base | {
                    "park_attempts": parks,
                    "max_bytes": 2**62,
                    "first_always": True,
                }
                if fair:
                    params |= {
                        "cursor": "",
                        "tenants": max(1, min(store.fair_tenants_per_claim, claim)),
                        "exclude_tenants": [],
                        "fill": True,
                    }
                plans.append(
                    explain(explain_conn, "claim_due_fair" if fair else "claim_due", params)
                )
                taken = [(str(i), at) for i, at in _claimed(stats)]
                deletes = statement_params("delete_fired", NODE_ID, taken)
                plans.append(explain(explain_conn, "delete_fired", deletes))
                drained += len(taken)
                claims += 1
                continue
            got = [r for r in store.claim(NODE_ID, HORIZON_MS, claim, parks, fair=fair) if r.id]
            if not got:
                break
            store.delete_fired(NODE_ID, [(r.id, r.readied_at) for r in got])
            drained += len(got)
            claims += 1
        after = finished()
        drain = phase("drain", rows, drained, before, after)
        drain.explain = "\n\n".join(plans)
        result.phases.append(drain)

        before = snapshot(stats, pid)
        time.sleep(settle)
        after = finished()
        result.phases.append(phase("settle", preload, size, before, after))
        return result
    finally:
        store.close()
        explain_conn.close()
        stats.close()


def leader_plans(
    store: PostgresStore, conn: psycopg.Connection[Any], settings: Any, parks: int
) -> str:
    """The leader's periodic statements (``find_stuck``, ``reset_lapsed_claims``) under
    EXPLAIN (ANALYZE, BUFFERS) while a node holds ``max_in_flight`` claimed rows, none stuck and
    no node lapsed: what they cost every time they run in a busy, healthy cluster. The claims
    are given back afterwards (the drain then claims them again)."""
    held: list[tuple[str, datetime]] = []
    while len(held) < settings.max_in_flight:
        rows = store.claim(NODE_ID, HORIZON_MS, settings.claim_batch_size, parks)
        if not rows:
            break
        held += [(r.id, r.readied_at) for r in rows]
    stuck = {"hold_ms": settings.hold_time_ms, "limit": 1000, "own_node": None, "own_since": None}
    lapsed = {
        "window_ms": 10_000,
        "node_id": str(uuid.uuid4()),
        "limit": 1000,
        "history": False,
    }
    plans = [f"({len(held):,} rows claimed)"]
    for name, params in (("find_stuck", stuck), ("reset_lapsed_claims", lapsed)):
        statement: LiteralString = "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) " + query(name)
        with conn.transaction():
            rows = conn.execute(statement, params).fetchall()
        plans.append("\n".join(str(r[0]) for r in rows))
    store.release(NODE_ID, held, failed=False)
    return "\n\n".join(plans)


def _claimed(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return conn.execute(CLAIMED_SQL, {"node": NODE_ID}).fetchall()


@contextmanager
def instrumented_postgres(server: Mapping[str, str]) -> Iterator[tuple[str, int]]:
    """A durable scratch Postgres with pg_stat_statements loaded, I/O timing on and the
    ``server`` settings, migrated; yields its URL and the postmaster's pid."""
    settings = {
        "shared_preload_libraries": "pg_stat_statements",
        "track_io_timing": "on",
        "track_wal_io_timing": "on",
        **server,
    }
    with tempfile.TemporaryDirectory(prefix="chronos-pg_cost-") as tmp:
        workspace = Path(tmp)
        pg = EmbeddedPostgres(workspace / "postgres", durable=True, workspace=workspace)
        with pg:
            alter_system(pg.url, settings)
            url = pg.restart()
            migrate.upgrade(url)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            assert pg.pid is not None
            yield url, pg.pid


def apply_variant(url: str, drop_indexes: list[str], table_options: Mapping[str, str]) -> None:
    """A change under study, on the scratch database only (never a migration): indexes
    dropped, storage parameters of ``chronos_messages`` set."""
    with psycopg.connect(url, autocommit=True) as conn:
        for name in drop_indexes:
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
        for name, value in table_options.items():
            conn.execute(
                sql.SQL("ALTER TABLE chronos_messages SET ({} = {})").format(
                    sql.Identifier(name), sql.Literal(value)
                )
            )


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="50000,1000000", help="burst sizes, comma-separated")
    parser.add_argument("--preload", type=int, default=0, help="far-future rows beside each burst")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after the drain")
    parser.add_argument("--out", type=Path, help="write every figure as JSON here")
    parser.add_argument(
        "--fair",
        action="store_true",
        help="claim with the fair claim (claim_due_fair), as a node does while its claims "
        "come back full",
    )
    parser.add_argument(
        "--drop-index",
        action="append",
        default=[],
        metavar="NAME",
        help="a variant under study: drop this index of chronos_messages first (repeatable)",
    )
    parser.add_argument(
        "--table-option",
        action="append",
        default=[],
        type=_pair,
        metavar="NAME=VALUE",
        help="a variant: a storage parameter of chronos_messages, e.g. fillfactor=70",
    )
    parser.add_argument(
        "--server-setting",
        action="append",
        default=[],
        type=_pair,
        metavar="NAME=VALUE",
        help="a variant: a server setting, e.g. max_wal_size=8GB or wal_compression=lz4",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    # The node's defaults, or the CHRONOS_* settings of the environment (batch sizes: e.g.
    # CHRONOS_CLAIM_BATCH_SIZE=400, the claims a node made in the benchmark's bursts).
    environ = {k: v for k, v in os.environ.items() if k.startswith("CHRONOS_")}
    settings = chronos_settings.load(None, environ=environ, database_url="postgresql://unused/x")
    results = []
    with instrumented_postgres(dict(args.server_setting)) as (url, pid):
        apply_variant(url, args.drop_index, dict(args.table_option))
        with psycopg.connect(url, autocommit=True) as conn:
            index_defs = fetch_rows(conn, INDEX_DEFS_SQL)
        for size in sizes:
            results.append(run_size(url, pid, size, args.preload, args.settle, settings, args.fair))
            print(f"burst {size:,} measured", flush=True)
    print(render(results, index_defs))
    if args.out:
        args.out.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n")


if __name__ == "__main__":
    main()
