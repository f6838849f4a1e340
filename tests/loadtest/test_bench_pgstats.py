"""A load's Postgres split by statement and by process kind (``loadtest.bench.pgstats``): the
statements named as Chronos names them, the deltas between two snapshots, the report's lines."""

from __future__ import annotations

import re

import pytest

from chronos.store.postgres.sql import queries
from loadtest.bench import pgstats
from loadtest.bench.pgstats import PgSnapshot, breakdown, chronos_statements, statement_label
from loadtest.bench.records import BenchRecord
from loadtest.bench.report import render_markdown
from loadtest.bench.results.postgres import PgBreakdown


def as_pg_stat_statements(body: str) -> str:
    """A named query as ``pg_stat_statements`` shows it: from its first token on, every
    parameter and constant (booleans too) as ``$n``."""
    text = "\n".join(line for line in body.splitlines() if not line.startswith("--"))
    counter = iter(range(1, 10_000))
    constant = r"%\(\w+\)[sb]|E?'[^']*'|\b\d+(\.\d+)?\b|(?i:\btrue\b|\bfalse\b)"
    text = re.sub(constant, lambda _: f"${next(counter)}", text)
    return text


def test_every_named_query_is_recognised() -> None:
    named = chronos_statements()
    for name in ("enqueue_batch", "claim_due", "delete_fired", "backlog", "heartbeat"):
        assert statement_label(as_pg_stat_statements(queries()[name]), named) == name
    other = statement_label("SELECT   count(*)\n FROM chronos_messages WHERE x = $1", named)
    assert other == "SELECT count(*) FROM chronos_messages WHERE x = $1"


def test_process_kinds() -> None:
    assert pgstats.process_kind("postgres: autovacuum worker postgres") == "autovacuum"
    assert pgstats.process_kind("postgres: checkpointer") == "checkpointer"
    assert pgstats.process_kind("postgres: postgres postgres 127.0.0.1(5) idle") == "backend"
    assert pgstats.process_kind("postgres: io worker 0") == "other"


def test_breakdown_of_a_load() -> None:
    before = PgSnapshot(
        {"claim_due": (10.0, 500.0), "enqueue_batch": (5.0, 100.0), "ping": (3.0, 1.0)},
        {"backend": 10.0, "reaped": 1.0},
    )
    after = PgSnapshot(
        {
            "claim_due": (110.0, 2_500.0),
            "enqueue_batch": (55.0, 3_100.0),
            "ping": (3.0, 1.0),  # not run during the load: left out
            "delete_fired": (100.0, 1_000.0),
        },
        {"backend": 16.0, "reaped": 1.5, "autovacuum": 0.75},
    )
    pg = breakdown(before, after, 100_000)
    assert [(s.statement, s.calls, s.exec_s, s.exec_us_per_message) for s in pg.statements] == [
        ("enqueue_batch", 50, 3.0, 30.0),
        ("claim_due", 100, 2.0, 20.0),
        ("delete_fired", 100, 1.0, 10.0),
    ]
    assert pg.cpu_by_kind_s == {"autovacuum": 0.75, "backend": 6.0, "reaped": 0.5}
    assert PgBreakdown.from_dict(pg.as_dict()) == pg
    bench = BenchRecord.from_dict(
        {"scenarios": [{"name": "burst-1m", "kind": "burst", "postgres_breakdown": pg.as_dict()}]}
    )
    md = render_markdown(bench)
    assert "### Postgres by statement and by process" in md
    assert (
        "- **burst-1m**: `enqueue_batch` 3.00 s (30.0 µs/msg, 50 calls); `claim_due` 2.00 s "
        "(20.0 µs/msg, 100 calls); `delete_fired` 1.00 s (10.0 µs/msg, 100 calls). "
        "CPU s: autovacuum 0.75, backend 6.00, reaped 0.50."
    ) in md


def test_the_table_and_wal_activity_of_a_load() -> None:
    before = PgSnapshot(
        {},
        {},
        {"autovacuums": 2.0, "autovacuum_s": 1.5, "wal_records": 1_000.0, "wal_bytes": 9e4},
    )
    after = PgSnapshot(
        {},
        {},
        {
            "autovacuums": 5.0,
            "autovacuum_s": 4.0,
            "wal_records": 601_000.0,
            "wal_bytes": 9e4 + 57_300_000,
            "wal_fpi": 10.0,  # not in the first snapshot: left out
        },
    )
    pg = breakdown(before, after, 100_000)
    assert pg.activity == {
        "autovacuums": 3.0,
        "autovacuum_s": 2.5,
        "wal_records": 600_000.0,
        "wal_bytes": 57_300_000.0,
    }
    assert PgBreakdown.from_dict(pg.as_dict()) == pg
    rec = {
        "name": "burst-1m",
        "kind": "burst",
        "postgres_breakdown": pg.as_dict(),
        "cpu_per_message": {"messages": 100_000},
    }
    md = render_markdown(BenchRecord.from_dict({"scenarios": [rec]}))
    assert (
        "Table and WAL: 3 autovacuums (2.50 s); WAL per message: 6.00 records, 573 bytes, "
        "0.000 full-page images."
    ) in md


def test_the_shards_snapshots_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench --shards``: each shard's statements, CPU by kind and counters, added up."""
    shards = {
        "a": PgSnapshot({"claim_due": (10.0, 50.0)}, {"backend": 2.0}, {"wal_bytes": 100.0}),
        "b": PgSnapshot(
            {"claim_due": (5.0, 20.0), "enqueue_batch": (3.0, 9.0)},
            {"backend": 1.0, "autovacuum": 0.5},
            {"wal_bytes": 50.0},
        ),
    }
    monkeypatch.setattr(pgstats, "snapshot", lambda sql, pid: shards[sql("which")])
    total = pgstats.snapshot_shards([lambda _: "a", lambda _: "b"], [1, 2])
    assert total == PgSnapshot(
        {"claim_due": (15.0, 70.0), "enqueue_batch": (3.0, 9.0)},
        {"backend": 3.0, "autovacuum": 0.5},
        {"wal_bytes": 150.0},
    )
    shards["b"] = None  # type: ignore[assignment]
    assert pgstats.snapshot_shards([lambda _: "a", lambda _: "b"], [1, 2]) is None
