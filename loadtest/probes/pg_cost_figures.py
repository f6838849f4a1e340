"""The pg_cost probe's figures: what it reads from Postgres before and after each phase
(its processes' CPU, ``pg_stat_statements``, ``pg_stat_wal``, ``pg_stat_io``,
``pg_stat_checkpointer``, the table's counters), one phase's figures per message, and the text
report of a run."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, LiteralString

import psutil
import psycopg

from loadtest.bench.pgstats import chronos_statements, cpu_by_kind, statement_label

STATEMENTS_SQL = """
SELECT query, calls, rows, total_exec_time, shared_blks_hit, shared_blks_read,
       shared_blks_dirtied, shared_blks_written, wal_records, wal_fpi, wal_bytes::bigint
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
WAL_SQL = "SELECT wal_records, wal_fpi, wal_bytes::bigint, wal_buffers_full FROM pg_stat_wal"
IO_SQL = """
SELECT backend_type, object, context, coalesce(writes, 0), coalesce(extends, 0),
       coalesce(fsyncs, 0), coalesce(hits, 0), coalesce(reads, 0)
FROM pg_stat_io
"""
CHECKPOINTER_SQL = (
    "SELECT num_timed, num_requested, buffers_written, write_time, sync_time "
    "FROM pg_stat_checkpointer"
)
TABLE_SQL = """
SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, autovacuum_count, n_dead_tup,
       pg_relation_size('chronos_messages'), pg_total_relation_size('chronos_messages')
FROM pg_stat_user_tables WHERE relname = 'chronos_messages'
"""

# -- what is read before and after each phase ----------------------------------------------


@dataclass
class Snapshot:
    wall: float
    postgres_cpu: dict[str, float]
    client_cpu: float
    statements: dict[str, list[float]]  # name -> calls, rows, exec ms, hit, read, ...
    wal: list[float]
    io: dict[str, list[float]]  # backend_type -> writes, extends, fsyncs, hits, reads
    checkpointer: list[float]
    table: list[float]


def fetch_rows(conn: psycopg.Connection[Any], statement: LiteralString) -> list[tuple[Any, ...]]:
    return conn.execute(statement).fetchall()


def flush_stats(*conns: psycopg.Connection[Any]) -> None:
    """Let the backends' pending statistics reach the shared ones: a backend flushes them at
    a transaction's end at most once a second (``pg_stat_wal``, ``pg_stat_io`` and the table
    counters lag otherwise; ``pg_stat_statements`` does not)."""
    time.sleep(1.1)
    for conn in conns:
        conn.execute("SELECT 1")


def snapshot(conn: psycopg.Connection[Any], pid: int, wall: float | None = None) -> Snapshot:
    statements: dict[str, list[float]] = {}
    named = chronos_statements()
    for text, *values in fetch_rows(conn, STATEMENTS_SQL):
        name = statement_label(str(text), named)
        prev = statements.get(name, [0.0] * len(values))
        statements[name] = [a + float(b or 0) for a, b in zip(prev, values, strict=True)]
    io: dict[str, list[float]] = {}
    for backend, _obj, _ctx, *values in fetch_rows(conn, IO_SQL):
        prev = io.get(str(backend), [0.0] * len(values))
        io[str(backend)] = [a + float(b or 0) for a, b in zip(prev, values, strict=True)]
    times = psutil.Process().cpu_times()
    return Snapshot(
        wall=time.monotonic() if wall is None else wall,
        postgres_cpu=cpu_by_kind(pid),
        client_cpu=times.user + times.system,
        statements=statements,
        wal=[float(v) for v in fetch_rows(conn, WAL_SQL)[0]],
        io=io,
        checkpointer=[float(v) for v in fetch_rows(conn, CHECKPOINTER_SQL)[0]],
        table=[float(v or 0) for v in fetch_rows(conn, TABLE_SQL)[0]],
    )


STATEMENT_FIELDS = (
    "calls",
    "rows",
    "exec_ms",
    "blks_hit",
    "blks_read",
    "blks_dirtied",
    "blks_written",
    "wal_records",
    "wal_fpi",
    "wal_bytes",
)
IO_FIELDS = ("writes", "extends", "fsyncs", "hits", "reads")


@dataclass
class Phase:
    """One phase's figures: totals, and per message where it says so."""

    name: str
    rows: int  # table size the phase ran at (the burst's, plus the preload)
    messages: int
    wall_s: float
    postgres_cpu_us: float  # Postgres CPU per message
    postgres_cpu_by_kind_us: dict[str, float]
    client_cpu_us: float  # this process (the store's Python) per message
    statements: dict[str, dict[str, float]]  # per message, except calls
    wal: dict[str, float]  # per message
    io: dict[str, dict[str, float]]  # totals by process kind (only non-zero)
    checkpoints: dict[str, float]  # totals
    table: dict[str, float]  # totals of the tuple counters
    explain: str = ""


def _delta(before: list[float], after: list[float]) -> list[float]:
    return [b - a for a, b in zip(before, after, strict=True)]


def phase(name: str, rows: int, messages: int, a: Snapshot, b: Snapshot) -> Phase:
    per = max(1, messages)
    kinds = {
        k: round((b.postgres_cpu.get(k, 0.0) - a.postgres_cpu.get(k, 0.0)) * 1e6 / per, 1)
        for k in sorted(set(a.postgres_cpu) | set(b.postgres_cpu))
    }
    statements = {}
    for stmt, values in b.statements.items():
        d = _delta(a.statements.get(stmt, [0.0] * len(values)), values)
        if d[0] <= 0:
            continue
        figures = dict(zip(STATEMENT_FIELDS, d, strict=True))
        statements[stmt] = {"calls": figures.pop("calls")} | {
            k: round(v / per * (1000 if k == "exec_ms" else 1), 3) for k, v in figures.items()
        }
        statements[stmt]["exec_us"] = statements[stmt].pop("exec_ms")
    wal = dict(zip(("records", "fpi", "bytes", "buffers_full"), _delta(a.wal, b.wal), strict=True))
    io = {}
    for backend, values in b.io.items():
        d = _delta(a.io.get(backend, [0.0] * len(values)), values)
        if any(d[:3]):
            io[backend] = dict(zip(IO_FIELDS, d, strict=True))
    table = dict(
        zip(
            ("ins", "upd", "hot_upd", "del", "autovacuums", "dead_now", "heap_bytes", "total"),
            _delta(a.table, b.table),
            strict=True,
        )
    )
    table["dead_now"], table["heap_bytes"], table["total_bytes"] = (
        b.table[5],
        b.table[6],
        b.table[7],
    )
    table.pop("total")
    return Phase(
        name=name,
        rows=rows,
        messages=messages,
        wall_s=round(b.wall - a.wall, 2),
        postgres_cpu_us=round(sum(kinds.values()), 1),
        postgres_cpu_by_kind_us={k: v for k, v in kinds.items() if v},
        client_cpu_us=round((b.client_cpu - a.client_cpu) * 1e6 / per, 1),
        statements=statements,
        wal={k: round(v / per, 3) if k != "buffers_full" else v for k, v in wal.items()},
        io=io,
        checkpoints=dict(
            zip(
                ("timed", "requested", "buffers_written", "write_ms", "sync_ms"),
                _delta(a.checkpointer, b.checkpointer),
                strict=True,
            )
        ),
        table=table,
    )


@dataclass
class SizeResult:
    size: int
    preload: int
    phases: list[Phase] = field(default_factory=list)
    indexes: dict[str, int] = field(default_factory=dict)  # bytes at the end of the enqueue


# -- output ---------------------------------------------------------------------------------


def render(results: list[SizeResult], index_defs: list[tuple[Any, ...]]) -> str:
    lines = ["Indexes of chronos_messages:"]
    lines += [f"  {name}: {definition}" for name, definition in index_defs]
    for res in results:
        lines += ["", f"== burst of {res.size:,} messages (+ {res.preload:,} preloaded rows) =="]
        lines.append(
            "index sizes after the enqueue: "
            + ", ".join(f"{n} {b / 2**20:.1f} MB" for n, b in res.indexes.items())
        )
        for ph in res.phases:
            lines += [
                "",
                f"-- {ph.name}: {ph.messages:,} messages in {ph.wall_s} s; Postgres CPU "
                f"{ph.postgres_cpu_us} µs/msg "
                f"({', '.join(f'{k} {v}' for k, v in ph.postgres_cpu_by_kind_us.items())}); "
                f"client {ph.client_cpu_us} µs/msg",
                f"   WAL per msg: {ph.wal['records']} records, {ph.wal['fpi']} full-page "
                f"images, {ph.wal['bytes']:.0f} bytes; "
                f"WAL buffers full {ph.wal['buffers_full']:.0f}",
                f"   checkpoints {ph.checkpoints}; table {ph.table}",
            ]
            for backend, io in ph.io.items():
                lines.append(f"   io {backend}: {io}")
            for stmt, figures in sorted(ph.statements.items()):
                lines.append(f"   {stmt}: {figures}")
    for res in results:
        for ph in res.phases:
            if ph.explain:
                lines += ["", f"== EXPLAIN, {ph.name} of the {res.size:,} burst ==", ph.explain]
    return "\n".join(lines)
