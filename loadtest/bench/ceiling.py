"""The ceiling: the node's own statements on a Postgres, without Kafka or the loops around them.

Two threads, like a node's intake and firing loops, drive ``chronos.store.PostgresStore``: one
enqueues batches of messages (due ``delay`` later) with ``enqueue``, the other claims due rows
with ``claim`` (the ``claim_due`` statement) and deletes them with ``delete_fired``. Only the
store's public methods are called, so the ceiling runs exactly the node's named SQL, with its
parameter encoding, its session settings (``SESSION_SETTINGS``, statement timeout, synchronous
commit) and the node's defaults for the batch size, horizon and park threshold (from
``chronos.config.settings``, so ``CHRONOS_*`` variables apply to it as to a node). The steady rate
of
deleted rows is the throughput limit of a Chronos node on that server; the benchmark states the
node's drain rate as a ratio of it (saturation).

The statements run in a scratch schema (``chronos_ceiling``) holding copies of the tables they
touch (same columns, indexes and storage parameters), reached through the session's
``search_path``; the schema is dropped at the end, so a live table is never touched.
"""

from __future__ import annotations

import argparse
import json
import resource
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from loadtest.bench.procstats import tree_cpu_s

SCHEMA = "chronos_ceiling"
TABLES = ("chronos_messages", "chronos_cancels")  # what enqueue, claim and delete_fired touch


@dataclass
class CeilingResult:
    seconds: float
    batch: int
    payload_bytes: int
    inserted: int
    deleted: int
    insert_per_s: float
    delete_per_s: float
    ceiling_msg_per_s: float  # deleted per second in the measured window (the pipeline's rate)
    claim_ms_avg: float
    delete_ms_avg: float
    insert_ms_avg: float
    statements: str = "store"  # the node's own statements, through chronos.store
    # CPU seconds in the measured window: Postgres (postmaster and backends) and this process
    # (the two threads driving the store, as a node's loops would); None when not measured.
    postgres_cpu_s: float | None = None
    client_cpu_s: float | None = None


def scratch_url(url: str) -> str:
    """``url`` with the scratch schema first on the session's ``search_path``."""
    from chronos.store import libpq_url

    base = libpq_url(url)
    own = str(conninfo_to_dict(base).get("options") or "")
    return make_conninfo(base, options=f"{own} -c search_path={SCHEMA},public".strip())


def create_scratch(conn: psycopg.Connection[Any]) -> None:
    """The scratch schema with empty copies of the tables (indexes and storage parameters
    included)."""
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(SCHEMA)))
    for table in TABLES:
        row = conn.execute(
            "SELECT n.nspname, c.reloptions FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass(%s)",
            (table,),
        ).fetchone()
        if row is None:
            raise RuntimeError(f"table {table} not found: is the database migrated?")
        source, reloptions = row
        copy = sql.Identifier(SCHEMA, table)
        conn.execute(
            sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(
                copy, sql.Identifier(str(source), table)
            )
        )
        for option in reloptions or []:
            name, _, value = str(option).partition("=")
            conn.execute(
                sql.SQL("ALTER TABLE {} SET ({} = {})").format(
                    copy, sql.Identifier(name), sql.Literal(value)
                )
            )


def drop_scratch(url: str) -> None:
    from chronos.store import libpq_url

    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))


def run_ceiling(
    url: str,
    seconds: float = 20.0,
    batch: int | None = None,
    payload_bytes: int = 100,
    delay: float = 0.5,
    warmup: float = 3.0,
    max_backlog: int = 50_000,
    environ: Mapping[str, str] | None = None,
    postgres_pid: int | None = None,
) -> CeilingResult:
    """Enqueue, claim and delete through the node's store for ``seconds`` (after ``warmup``);
    ``batch`` defaults to the node's claim batch size, ``environ`` holds CHRONOS_* settings.
    With ``postgres_pid`` (the postmaster) the CPU Postgres and this process used in the
    measured window is recorded too."""
    from chronos.config import settings as chronos_settings
    from chronos.config.policy import park_after
    from chronos.protocol import ScheduledMessage
    from chronos.store import PostgresStore

    settings = chronos_settings.load(None, environ=dict(environ or {}), database_url=url)
    size = batch or settings.claim_batch_size
    horizon_ms = settings.timing_advance_ms + settings.lookahead_ms
    parks = park_after(settings)
    from chronos.store import libpq_url

    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        create_scratch(conn)
    store = PostgresStore(
        scratch_url(url),
        application_name="chronos-ceiling",
        statement_timeout_ms=settings.effective_statement_timeout_ms,
        tcp_timeout_ms=settings.database_tcp_timeout_ms,
        synchronous_commit=settings.database_synchronous_commit,
        history=bool(settings.history_ttl),
    )
    # The history's partitions, as a node's leader creates them at start-up: without them every
    # delete failed over to a second statement without its history records (the ceiling then
    # measured that detour, not what nodes run).
    if settings.history_ttl:
        store.maintain_history(settings.history_ttl)
    stop = threading.Event()
    measuring = threading.Event()
    counts = {"inserted": 0, "deleted": 0, "claims": 0, "deletes": 0, "inserts": 0}
    times = {"claim": 0.0, "delete": 0.0, "insert": 0.0}
    backlog = [0]
    value = b"x" * payload_bytes
    headers: list[tuple[str, bytes | None]] = [("trace", b"1")]
    node = str(uuid.uuid4())
    errors: list[BaseException] = []

    def inserter() -> None:
        try:
            n = 0
            while not stop.is_set():
                if backlog[0] > max_backlog:
                    time.sleep(0.005)
                    continue
                due = datetime.now(UTC) + timedelta(seconds=delay)
                messages = [
                    ScheduledMessage(f"c{i}", due, b"key-%d" % (i % 1000), value, headers)
                    for i in range(n, n + size)
                ]
                t0 = time.perf_counter()
                store.enqueue(messages, settings.timing_advance_ms)
                n += size
                backlog[0] += size
                if measuring.is_set():
                    times["insert"] += time.perf_counter() - t0
                    counts["inserts"] += 1
                    counts["inserted"] += size
        except BaseException as exc:  # noqa: BLE001 - raised again by run_ceiling
            errors.append(exc)
            stop.set()

    def firer() -> None:
        try:
            while not stop.is_set():
                t0 = time.perf_counter()
                rows = store.claim(node, horizon_ms, size, parks)
                t1 = time.perf_counter()
                if not rows:
                    time.sleep(0.005)
                    continue
                store.delete_fired(node, [(r.id, r.readied_at) for r in rows])
                t2 = time.perf_counter()
                backlog[0] -= len(rows)
                if measuring.is_set():
                    times["claim"] += t1 - t0
                    times["delete"] += t2 - t1
                    counts["claims"] += 1
                    counts["deletes"] += 1
                    counts["deleted"] += len(rows)
        except BaseException as exc:  # noqa: BLE001 - raised again by run_ceiling
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=inserter), threading.Thread(target=firer)]
    try:
        for t in threads:
            t.start()
        stop.wait(warmup + delay)
        pg_before, own_before = _cpu_now(postgres_pid)
        measuring.set()
        started = time.perf_counter()
        stop.wait(seconds)
        measuring.clear()
        elapsed = time.perf_counter() - started
        pg_after, own_after = _cpu_now(postgres_pid)
    finally:
        stop.set()
        for t in threads:
            t.join()
        store.close()
        drop_scratch(url)
    if errors:
        raise errors[0]
    return CeilingResult(
        seconds=round(elapsed, 2),
        batch=size,
        payload_bytes=payload_bytes,
        inserted=counts["inserted"],
        deleted=counts["deleted"],
        insert_per_s=round(counts["inserted"] / elapsed, 1),
        delete_per_s=round(counts["deleted"] / elapsed, 1),
        ceiling_msg_per_s=round(counts["deleted"] / elapsed, 1),
        claim_ms_avg=round(1000 * times["claim"] / max(1, counts["claims"]), 2),
        delete_ms_avg=round(1000 * times["delete"] / max(1, counts["deletes"]), 2),
        insert_ms_avg=round(1000 * times["insert"] / max(1, counts["inserts"]), 2),
        postgres_cpu_s=None if postgres_pid is None else round(pg_after - pg_before, 2),
        client_cpu_s=round(own_after - own_before, 2),
    )


def _cpu_now(postgres_pid: int | None) -> tuple[float, float]:
    """CPU seconds so far of Postgres's process tree (0 without a pid) and of this process."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return tree_cpu_s(postgres_pid), own.ru_utime + own.ru_stime


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--database-url", required=True, help="a migrated Chronos database")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window")
    parser.add_argument(
        "--batch",
        type=int,
        default=None,
        help="rows per statement (default: the node's claim batch size, CHRONOS_CLAIM_BATCH_SIZE)",
    )
    parser.add_argument("--payload-bytes", type=int, default=100)
    parser.add_argument("--out", default=None, help="write the result as JSON here")


def main(args: argparse.Namespace) -> int:
    import os

    result = run_ceiling(
        args.database_url,
        seconds=args.seconds,
        batch=args.batch,
        payload_bytes=args.payload_bytes,
        environ={k: v for k, v in os.environ.items() if k.startswith("CHRONOS_")},
    )
    text = json.dumps(asdict(result), indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return 0
