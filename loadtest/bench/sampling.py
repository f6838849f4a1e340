"""The sampler: every second, node memory (PSS) and process-tree CPU, the table's
waiting/claimed/overdue rows and each node's consumer lag; and the stall watch that saves a
stalled node's stacks."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtest.bench.procstats import TreeCpu, proc_stat, tree_pss_kb
from loadtest.bench.profiles import py_spy_binary
from loadtest.bench.promtext import metric_total, parse_prometheus
from loadtest.bench.results.node import Stall
from loadtest.bench.results.samples import StackSample, TableCounts
from loadtest.bench.stack import SAMPLE_SQL, NodeProcess

SAMPLE_INTERVAL_S = 1.0


class Sampler(threading.Thread):
    """Every second: node memory (PSS), the table's waiting/claimed/overdue rows, consumer lag."""

    def __init__(
        self,
        url: str | Sequence[str],
        nodes: Sequence[NodeProcess],
        interval: float = SAMPLE_INTERVAL_S,
        stall_dir: Path | None = None,
        cpu_trees: Sequence[TreeCpu] = (),
    ) -> None:
        super().__init__(name="bench-sampler", daemon=True)
        self.urls = [url] if isinstance(url, str) else list(url)  # every shard's, 0 first
        self.nodes = list(nodes)
        self.interval = interval
        self.samples: list[StackSample] = []
        self.rss_max_kb: dict[int, int] = {}
        self.stall_dir = stall_dir
        self.stalls: list[Stall] = []
        self._watch = {n.index: StallWatch() for n in self.nodes}
        self._stop_event = threading.Event()
        # Sampled every second so a child that exits unreaped between two CPU snapshots still
        # counts (see TreeCpu).
        self.cpu_trees = list(cpu_trees)
        # CPU seconds of the Postgres backend(s) answering the sampler's own statement, by
        # backend pid (last seen): the benchmark's instrumentation, not Chronos's work. Its
        # count of the waiting rows walks them all, every second.
        self._backend_cpu: dict[int, float] = {}

    @property
    def postgres_cpu_s(self) -> float:
        """CPU seconds Postgres spent on the sampler's statements so far."""
        return sum(self._backend_cpu.values())

    def note_backend(self, conn: Any) -> None:
        """Read the CPU of the backend behind ``conn`` (after each of the sampler's queries)."""
        pid = int(conn.info.backend_pid)
        stat = proc_stat(pid)
        if stat is not None:
            self._backend_cpu[pid] = stat.cpu_s

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)

    def run(self) -> None:
        import psycopg

        conns: dict[str, Any] = {}
        next_at = time.monotonic()
        while not self._stop_event.is_set():
            t_ms = int(time.time() * 1000)
            load1 = round(os.getloadavg()[0], 2)
            rss_mb = self._rss_mb()
            for tree in self.cpu_trees:
                tree.sample()
            table: TableCounts | None = None
            rows: list[Any] = []
            try:
                for url in self.urls:  # every shard's counts, added up
                    conn = conns.get(url)
                    if conn is None:
                        conn = psycopg.connect(url, autocommit=True, connect_timeout=5)
                        conns[url] = conn
                        conn.execute("SET statement_timeout = '5s'")
                        # One process: the count's CPU is this backend's, measured and left
                        # out of Postgres's figures (parallel workers would end in *reaped*).
                        conn.execute("SET max_parallel_workers_per_gather = 0")
                    rows.append(conn.execute(SAMPLE_SQL).fetchone())
                    self.note_backend(conn)
                oldest = [r[3] for r in rows if r[3] is not None]
                table = TableCounts(
                    waiting=sum(r[0] for r in rows),
                    claimed=sum(r[1] for r in rows),
                    overdue=sum(r[2] for r in rows),
                    oldest_overdue_s=round(max(oldest), 3) if oldest else None,
                )
            except Exception:  # noqa: BLE001 - a missed sample, retried next second
                for failed in conns.values():
                    with contextlib.suppress(Exception):
                        failed.close()
                conns = {}
            conn = conns.get(self.urls[0])
            overdue = None if table is None else table.overdue
            lag = in_flight = 0.0
            scraped = False
            for node in self.nodes:
                samples = parse_prometheus(node.metrics_text())
                value = metric_total(samples, "chronos_consumer_lag_messages")
                held = metric_total(samples, "chronos_in_flight_messages")
                fired = metric_total(samples, "chronos_fired_messages_total")
                if value is not None:
                    lag += value
                    scraped = True
                in_flight += held or 0.0
                if self._watch[node.index].stalled(t_ms / 1000, fired, overdue):
                    self._record_stall(node, conn, t_ms, overdue)
            self.samples.append(
                StackSample(t_ms, load1, rss_mb, table, lag if scraped else None, in_flight)
            )
            next_at += self.interval
            self._stop_event.wait(max(0.0, next_at - time.monotonic()))
        for left in conns.values():
            with contextlib.suppress(Exception):
                left.close()

    def _rss_mb(self) -> dict[int, float | None]:
        """Each node's memory now (all its processes, shared pages once: ``tree_pss_kb``); the
        largest seen is kept in ``rss_max_kb``."""
        out: dict[int, float | None] = {}
        for node in self.nodes:
            rss = tree_pss_kb(node.pid)
            out[node.index] = None if rss is None else round(rss / 1024, 1)
            if rss is not None:
                self.rss_max_kb[node.index] = max(self.rss_max_kb.get(node.index, 0), rss)
        return out

    def _record_stall(self, node: NodeProcess, conn: Any, t_ms: int, overdue: int | None) -> None:
        """The node fires nothing while rows are overdue: keep its thread stacks and what the
        database sessions are doing, for whoever investigates."""
        if self.stall_dir is None:
            return
        path = self.stall_dir / f"stall-node{node.index}.txt"
        parts = [
            f"stall of node {node.index} (pid {node.pid}) at {t_ms} ms: "
            f"no message fired for {STALL_SECONDS:.0f} s while {overdue} "
            "rows are overdue",
            "",
        ]
        binary = py_spy_binary()
        if binary is not None:
            try:
                dump = subprocess.run(
                    [binary, "dump", "-p", str(node.pid), "--locals"],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                parts += ["== py-spy dump", dump.stdout, dump.stderr]
            except (OSError, subprocess.SubprocessError) as exc:
                parts.append(f"py-spy dump failed: {exc}")
        if conn is not None:
            with contextlib.suppress(Exception):
                rows = conn.execute(ACTIVITY_SQL).fetchall()
                parts.append("== pg_stat_activity")
                parts += [" | ".join("" if v is None else str(v) for v in row) for row in rows]
        path.write_text("\n".join(parts) + "\n")
        self.stalls.append(Stall(node.index, t_ms, overdue, path.name))


STALL_SECONDS = 10.0
"""A node that fires nothing for this long while rows are overdue is stalled."""

ACTIVITY_SQL = """
SELECT pid, application_name, state, wait_event_type, wait_event,
       round(extract(epoch FROM now() - query_start)::numeric, 3) AS running_s,
       left(regexp_replace(query, '\\s+', ' ', 'g'), 160) AS query
FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
ORDER BY query_start
"""


class StallWatch:
    """Tells once when a node's fired counter has not moved for ``STALL_SECONDS`` while rows
    are overdue."""

    def __init__(self, seconds: float = STALL_SECONDS) -> None:
        self.seconds = seconds
        self.last_fired: float | None = None
        self.since: float | None = None
        self.reported = False

    def stalled(self, t: float, fired: float | None, overdue: int | None) -> bool:
        if fired is None or self.reported:
            return False
        if fired != self.last_fired or not overdue:
            self.last_fired, self.since = fired, t
            return False
        if self.since is not None and t - self.since >= self.seconds:
            self.reported = True
            return True
        return False
