"""The soak's sampler: every ``interval`` seconds (default 10) each node's memory (PSS of its
processes) and CPU, the table's size, rows, dead rows and autovacuum runs, the WAL position,
Postgres's, the broker's, the load generator's and the whole machine's CPU, the broker's log
size and the nodes' consumer lag, appended to
``samples.jsonl`` as it goes (a run cut short keeps what it sampled).

It reuses the benchmark's readers: ``procstats`` (psutil: PSS, a process tree's CPU) and
``promtext`` (the nodes' ``/metrics``). Unlike the benchmark's per-second sampler it never counts
the table's rows (at millions of rows that count is Postgres's work of its own): the statistics'
live and dead rows come with the sizes, in one cheap statement (``PG_SAMPLE_SQL``).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtest.analysis.soak.samples import PG_SAMPLE_SQL, PgSample, SoakSample
from loadtest.bench.procstats import TreeCpu, machine_busy_s, tree_pss_kb
from loadtest.bench.promtext import metric_total, parse_prometheus
from loadtest.bench.stack import NodeProcess

DEFAULT_INTERVAL_S = 10.0


def directory_bytes(path: Path) -> int | None:
    """The disk space of every file under ``path``, as ``du`` counts it (None if it cannot be
    read): allocated blocks, not lengths, since the broker preallocates each segment's index
    files as sparse files of 10 MB."""
    total = 0
    try:
        for root, _dirs, files in os.walk(path):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.stat(os.path.join(root, name)).st_blocks * 512
    except OSError:
        return None
    return total


class SoakSampler(threading.Thread):
    def __init__(
        self,
        url: str,
        nodes: Sequence[NodeProcess],
        path: Path,
        *,
        postgres_pid: int | None,
        broker_pid: int | None,
        broker_log_dir: Path | None,
        interval: float = DEFAULT_INTERVAL_S,
    ) -> None:
        super().__init__(name="soak-sampler", daemon=True)
        self.url = url
        self.nodes = list(nodes)
        self.path = path
        self.interval = interval
        self.broker_log_dir = broker_log_dir
        self.samples: list[SoakSample] = []
        self.errors: list[str] = []
        self._stop_event = threading.Event()
        self._node_cpu = {n.index: TreeCpu(n.pid) for n in self.nodes}
        self._postgres = None if postgres_pid is None else TreeCpu(postgres_pid)
        self._broker = None if broker_pid is None else TreeCpu(broker_pid)
        self._load_generator: TreeCpu | None = None
        self._machine_start = machine_busy_s()
        self._conn: Any = None

    def watch_load_generator(self, pid: int) -> None:
        """Sample the load generator's CPU too, from now on."""
        self._load_generator = TreeCpu(pid)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(60)

    def run(self) -> None:
        next_at = time.monotonic()
        try:
            while not self._stop_event.is_set():
                self.sample()
                next_at += self.interval
                self._stop_event.wait(max(0.0, next_at - time.monotonic()))
        finally:
            self._close()

    def sample(self, final: bool = False) -> SoakSample:
        """Take one sample now, keep it and append it to the file."""
        lag = in_flight = fired = 0.0
        scraped = False
        for node in self.nodes:
            metrics = parse_prometheus(node.metrics_text()) if node.alive() else []
            value = metric_total(metrics, "chronos_consumer_lag_messages")
            if value is not None:
                scraped = True
                lag += value
            in_flight += metric_total(metrics, "chronos_in_flight_messages") or 0.0
            fired += metric_total(metrics, "chronos_fired_messages_total") or 0.0
        sample = SoakSample(
            t_ms=time.time_ns() // 1_000_000,
            load1=round(os.getloadavg()[0], 2),
            pss_mb={n.index: _mb(tree_pss_kb(n.pid)) for n in self.nodes},
            cpu_s={i: round(t.sample(), 2) for i, t in self._node_cpu.items()},
            consumer_lag=lag if scraped else None,
            in_flight=in_flight if scraped else None,
            fired_total=fired if scraped else None,
            pg=self._pg(),
            postgres_cpu_s=None if self._postgres is None else round(self._postgres.sample(), 2),
            broker_cpu_s=None if self._broker is None else round(self._broker.sample(), 2),
            broker_log_bytes=None
            if self.broker_log_dir is None
            else directory_bytes(self.broker_log_dir),
            load_generator_cpu_s=None
            if self._load_generator is None
            else round(self._load_generator.sample(), 2),
            machine_cpu_s=round(machine_busy_s() - self._machine_start, 2),
            final=final,
        )
        self.samples.append(sample)
        with self.path.open("a") as handle:
            handle.write(json.dumps(sample.as_dict()) + "\n")
        return sample

    def _pg(self) -> PgSample | None:
        import psycopg

        try:
            if self._conn is None:
                self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
                self._conn.execute("SET statement_timeout = '5s'")
            row = self._conn.execute(PG_SAMPLE_SQL).fetchone()
            return None if row is None else PgSample.from_row(tuple(row))
        except Exception as exc:  # noqa: BLE001 - a missed sample, retried at the next
            if len(self.errors) < 100:
                self.errors.append(repr(exc)[:300])
            self._close()
            return None

    def _close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None


def _mb(kb: int | None) -> float | None:
    return None if kb is None else round(kb / 1024, 1)
