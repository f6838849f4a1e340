"""Where Postgres's CPU went during a load: its statements by execution time
(``pg_stat_statements``, loaded into the benchmark's own Postgres) and its CPU by process kind
(client backends, autovacuum, checkpointer, WAL writer, background writer, and the exited
processes the postmaster reaped)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psutil

from loadtest.bench.results.postgres import PgBreakdown, StatementCost

STATEMENTS_SQL = """
SELECT query, calls, total_exec_time FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
TOP_STATEMENTS = 8
# The work Postgres did beside the statements: the table's autovacuums and autoanalyzes (their
# count and, from Postgres 18, their time), parallel workers launched (a statement's workers
# end and are reaped: their CPU is in *reaped* with autovacuum's), and the WAL written.
ACTIVITY_SQL = """
SELECT (SELECT to_jsonb(t) FROM pg_stat_user_tables t WHERE t.relname = 'chronos_messages'),
       (SELECT to_jsonb(d) FROM pg_stat_database d WHERE d.datname = current_database()),
       (SELECT to_jsonb(w) FROM pg_stat_wal w)
"""
ACTIVITY_FIELDS = {
    "autovacuums": (0, "autovacuum_count"),
    "autovacuum_s": (0, "total_autovacuum_time"),
    "autoanalyzes": (0, "autoanalyze_count"),
    "autoanalyze_s": (0, "total_autoanalyze_time"),
    "parallel_workers": (1, "parallel_workers_launched"),
    "wal_records": (2, "wal_records"),
    "wal_fpi": (2, "wal_fpi"),
    "wal_bytes": (2, "wal_bytes"),
}
"""Counter name -> (column of ACTIVITY_SQL, key); the ``_s`` ones are milliseconds there."""


def alter_system(url: str, settings: Mapping[str, str]) -> None:
    """``ALTER SYSTEM SET`` each server setting (they take effect at the next restart, or
    reload for the reloadable ones): the benchmark's and the probes' instrumented Postgres,
    ``shared_preload_libraries = 'pg_stat_statements'`` among them."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(url, autocommit=True) as conn:
        for name, value in settings.items():
            conn.execute(
                sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
            )


def _words(text: str) -> tuple[str, ...]:
    """A statement's words (keywords and names) without comments, literals or parameters:
    ``pg_stat_statements`` keeps the text from the first token on, every constant and
    parameter as ``$n``."""
    lines = [line.split("--", 1)[0] for line in text.splitlines()]
    flat = re.sub(r"E?'(?:[^']|'')*'", " ", " ".join(lines))
    flat = re.sub(r"%\(\w+\)[sb]|\$\d+", " ", flat)
    return tuple(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", flat))[:80]


def statement_label(text: str, named: dict[tuple[str, ...], str]) -> str:
    """Chronos's name for the statement (``claim_due``…), or the start of its text."""
    name = named.get(_words(text))
    return name if name is not None else " ".join(text.split())[:60]


def chronos_statements() -> dict[tuple[str, ...], str]:
    """Chronos's named queries by their words."""
    from chronos.store.postgres.sql import queries

    return {_words(body): name for name, body in queries().items()}


def process_kind(title: str) -> str:
    for marker, kind in (
        ("autovacuum", "autovacuum"),
        ("checkpointer", "checkpointer"),
        ("walwriter", "walwriter"),
        ("background writer", "bgwriter"),
        ("postgres: postgres", "backend"),
    ):
        if marker in title:
            return kind
    return "other"


def cpu_by_kind(postmaster: int | None) -> dict[str, float]:
    """CPU seconds of the postmaster's process tree by process kind (``reaped``: the children
    the postmaster waited for, autovacuum workers and backends that ended)."""
    if postmaster is None:
        return {}
    out: dict[str, float] = {}
    try:
        root = psutil.Process(postmaster)
        t = root.cpu_times()
        out["postmaster"] = t.user + t.system
        out["reaped"] = t.children_user + t.children_system
        children = root.children(recursive=True)
    except psutil.Error:
        return out
    for child in children:
        try:
            t = child.cpu_times()
            kind = process_kind(" ".join(child.cmdline()))
        except psutil.Error:
            continue
        out[kind] = out.get(kind, 0.0) + t.user + t.system + t.children_user + t.children_system
    return out


@dataclass
class PgSnapshot:
    statements: dict[str, tuple[float, float]]  # label -> calls, execution ms
    cpu: dict[str, float]
    activity: dict[str, float] = field(default_factory=dict)  # ACTIVITY_FIELDS, totals so far


def activity(sql: Callable[[str], Sequence[Any]]) -> dict[str, float]:
    """The totals of ``ACTIVITY_FIELDS`` so far (those this Postgres has)."""
    try:
        row = sql(ACTIVITY_SQL)[0]
    except Exception:  # noqa: BLE001 - a diagnostic; the run goes on
        return {}
    out: dict[str, float] = {}
    for name, (column, key) in ACTIVITY_FIELDS.items():
        value = (row[column] or {}).get(key)
        if isinstance(value, int | float | str):
            try:
                out[name] = float(value) / (1000 if name.endswith("_s") else 1)
            except ValueError:
                continue
    return out


def snapshot(sql: Callable[[str], Sequence[Any]], postmaster: int | None) -> PgSnapshot | None:
    """The statements' totals so far (None without ``pg_stat_statements``) and the CPU by
    process kind."""
    try:
        rows = sql(STATEMENTS_SQL)
    except Exception:  # noqa: BLE001 - the breakdown is a diagnostic; the run goes on
        return None
    named = chronos_statements()
    totals: dict[str, tuple[float, float]] = {}
    for text, calls, exec_ms in rows:
        label = statement_label(str(text), named)
        before = totals.get(label, (0.0, 0.0))
        totals[label] = (before[0] + float(calls or 0), before[1] + float(exec_ms or 0))
    return PgSnapshot(totals, cpu_by_kind(postmaster), activity(sql))


def snapshot_shards(
    sqls: Sequence[Callable[[str], Sequence[Any]]], postmasters: Sequence[int | None]
) -> PgSnapshot | None:
    """``snapshot`` of every shard's Postgres (``bench --shards``), added up: each statement's
    calls and time, each process kind's CPU, each counter."""
    taken = [snapshot(sql, pid) for sql, pid in zip(sqls, postmasters, strict=True)]
    if any(t is None for t in taken):
        return None
    total = PgSnapshot({}, {}, {})
    for one in taken:
        assert one is not None
        for label, (calls, exec_ms) in one.statements.items():
            c, e = total.statements.get(label, (0.0, 0.0))
            total.statements[label] = (c + calls, e + exec_ms)
        for kind, cpu in one.cpu.items():
            total.cpu[kind] = total.cpu.get(kind, 0.0) + cpu
        for name, value in one.activity.items():
            total.activity[name] = total.activity.get(name, 0.0) + value
    return total


def breakdown(before: PgSnapshot, after: PgSnapshot, messages: int) -> PgBreakdown:
    """What changed between two snapshots: the top statements by execution time (with their
    execution µs per message handled) and the CPU seconds of each process kind."""
    costs = []
    for label, (calls, exec_ms) in after.statements.items():
        calls0, exec0 = before.statements.get(label, (0.0, 0.0))
        if calls - calls0 <= 0:
            continue
        exec_s = (exec_ms - exec0) / 1000
        costs.append(
            StatementCost(
                label,
                int(calls - calls0),
                round(exec_s, 2),
                round(exec_s * 1e6 / messages, 1) if messages > 0 else None,
            )
        )
    costs.sort(key=lambda c: c.exec_s, reverse=True)
    kinds = {
        k: round(after.cpu.get(k, 0.0) - before.cpu.get(k, 0.0), 2)
        for k in sorted(set(before.cpu) | set(after.cpu))
    }
    counters = {
        k: round(v - before.activity[k], 3)
        for k, v in after.activity.items()
        if k in before.activity
    }
    return PgBreakdown(costs[:TOP_STATEMENTS], {k: v for k, v in kinds.items() if v > 0}, counters)
