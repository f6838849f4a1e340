"""What the soak samples every ``--interval`` (default 10 s), one line of ``samples.jsonl``
each: the nodes, Postgres's table and WAL, the broker, the load generator and the machine.
Counters are cumulative (CPU seconds since the sampler started, WAL position, the table's row
and autovacuum counts); the analysis turns them into rates per minute."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

SAMPLES_FILE = "samples.jsonl"

PG_SAMPLE_SQL = """
SELECT pg_total_relation_size(s.relid), pg_indexes_size(s.relid), pg_table_size(s.relid),
       s.n_live_tup, s.n_dead_tup, s.autovacuum_count, s.autoanalyze_count,
       s.n_tup_ins, s.n_tup_upd, s.n_tup_del,
       pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint
FROM pg_stat_user_tables s WHERE s.relname = 'chronos_messages'
"""
"""Postgres's part of a sample: table + index size (``pg_total_relation_size``), index size,
the statistics' live and dead rows, autovacuum and autoanalyze runs, rows inserted, updated and
deleted, and the WAL position in bytes. Cheap: no row is read."""


@dataclass(frozen=True, slots=True)
class PgSample:
    total_bytes: int
    index_bytes: int
    table_bytes: int
    live_rows: int
    dead_rows: int
    autovacuum_count: int
    autoanalyze_count: int
    rows_inserted: int
    rows_updated: int
    rows_deleted: int
    wal_bytes: int

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> PgSample:
        return cls(*(int(v or 0) for v in row))

    @property
    def row_changes(self) -> int:
        """Rows written or removed: a message is stored (insert), claimed (update) and fired
        (delete); a series' occurrence advances it (update)."""
        return self.rows_inserted + self.rows_updated + self.rows_deleted


@dataclass(frozen=True, slots=True)
class SoakSample:
    """One sample. Per node ``i``: ``pss_mb[i]`` (the PSS of its processes, MB) and
    ``cpu_s[i]`` (its process tree's CPU seconds since the sampler started). ``final`` marks
    the sample taken after the drain."""

    t_ms: int
    load1: float | None = None
    pss_mb: dict[int, float | None] = field(default_factory=dict)
    cpu_s: dict[int, float | None] = field(default_factory=dict)
    consumer_lag: float | None = None
    in_flight: float | None = None
    fired_total: float | None = None
    pg: PgSample | None = None
    postgres_cpu_s: float | None = None
    broker_cpu_s: float | None = None
    broker_log_bytes: int | None = None
    load_generator_cpu_s: float | None = None
    machine_cpu_s: float | None = None  # every CPU's busy seconds since boot
    final: bool = False

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"t_ms": self.t_ms, "load1": self.load1}
        out.update({f"pss_mb_{i}": v for i, v in self.pss_mb.items()})
        out.update({f"cpu_s_{i}": v for i, v in self.cpu_s.items()})
        out.update(
            consumer_lag=self.consumer_lag,
            in_flight=self.in_flight,
            fired_total=self.fired_total,
            postgres_cpu_s=self.postgres_cpu_s,
            broker_cpu_s=self.broker_cpu_s,
            broker_log_bytes=self.broker_log_bytes,
            load_generator_cpu_s=self.load_generator_cpu_s,
            machine_cpu_s=self.machine_cpu_s,
            final=self.final,
        )
        if self.pg is not None:
            out.update({f.name: getattr(self.pg, f.name) for f in fields(PgSample)})
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SoakSample:
        def node(prefix: str) -> dict[int, float | None]:
            return {
                int(k.removeprefix(prefix)): v
                for k, v in data.items()
                if k.startswith(prefix) and k.removeprefix(prefix).isdigit()
            }

        names = [f.name for f in fields(PgSample)]
        has_pg = all(data.get(n) is not None for n in names)
        return cls(
            t_ms=int(data["t_ms"]),
            load1=data.get("load1"),
            pss_mb=node("pss_mb_"),
            cpu_s=node("cpu_s_"),
            consumer_lag=data.get("consumer_lag"),
            in_flight=data.get("in_flight"),
            fired_total=data.get("fired_total"),
            pg=PgSample(*(int(data[n]) for n in names)) if has_pg else None,
            postgres_cpu_s=data.get("postgres_cpu_s"),
            broker_cpu_s=data.get("broker_cpu_s"),
            broker_log_bytes=data.get("broker_log_bytes"),
            load_generator_cpu_s=data.get("load_generator_cpu_s"),
            machine_cpu_s=data.get("machine_cpu_s"),
            final=bool(data.get("final")),
        )


def read_samples(path: Path) -> list[SoakSample]:
    """The samples of ``samples.jsonl`` in time order (a line cut short at the end skipped)."""
    out: list[SoakSample] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            out.append(SoakSample.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            continue
    return sorted(out, key=lambda s: s.t_ms)
