"""Measuring one run of the load generator: the nodes' and the stack's CPU, memory and
metrics around it, with the sampler and the profiler running; its figures into the record."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.bench import pgstats
from loadtest.bench.context import Context, wait_child
from loadtest.bench.pgstats import PgSnapshot
from loadtest.bench.pinning import pin_tree
from loadtest.bench.procstats import TreeCpu, cpu_delta, cpu_snapshot, idle_cores, tree_hwm_kb
from loadtest.bench.profiles import Profiler, finish_profile
from loadtest.bench.promtext import node_metrics
from loadtest.bench.results.cpu import CpuUsage
from loadtest.bench.sampling import Sampler
from loadtest.bench.scenarios import Scenario, Workload
from loadtest.bench.stack import NodeProcess, clean_env, launch

IDLE_SETTLE_S = 1.0
IDLE_WINDOW_S = 5.0
"""Before the load, the nodes run this long with none (after settling), Postgres's CPU measured:
its idle rate (every node's polls, heartbeats and leaders' statements in every shard), which
the figures per message are given without as well (``CpuUsage.postgres_idle_cores``)."""


def profile_start_s(w: Workload) -> float:
    window = w.steady_window_s()
    if window is not None:
        return window[0] + 1.0
    low, _, _ = w.delay_bounds_s()
    return max(0.0, low - 1.0) if w.is_burst() else low


@dataclass
class LoadRun:
    """What was measured around one run of the load generator."""

    returncode: int
    elapsed: float
    load_before: tuple[float, float, float]
    cpu: CpuUsage
    metrics_before: list[str]
    metrics_after: list[str]
    hwm_kb: dict[int, int | None]
    exit_codes: dict[int, int | None]
    sampler: Sampler
    profiler: Profiler | None
    postgres: tuple[PgSnapshot | None, PgSnapshot | None] = (None, None)


def run_load(
    ctx: Context,
    scenario: Scenario,
    sdir: Path,
    nodes: Sequence[NodeProcess],
    argv: list[str],
    background_argv: list[str] | None = None,
    harness_cpus: Sequence[int] = (),
) -> LoadRun:
    """The load generator (and the background one) with the sampler (and the profiler)
    running; the nodes stopped. With ``harness_cpus`` the load generators are pinned to them
    as they start (before they start their Kafka clients' threads)."""
    assert scenario.workload is not None
    stack = ctx.stack
    time.sleep(IDLE_SETTLE_S)
    postgres_idle = idle_cores(stack.postgres_pids, IDLE_WINDOW_S)
    metrics_before = [n.metrics_text() for n in nodes]
    trees = {n.index: TreeCpu(n.pid) for n in nodes}
    pg_before = pgstats.snapshot_shards(stack.shard_sqls(), stack.postgres_pids)
    cpu_before = cpu_snapshot(trees, stack.postgres_pids, stack.broker_pid)
    load_before = os.getloadavg()
    sampler = Sampler(stack.urls, nodes, stall_dir=sdir, cpu_trees=list(trees.values()))
    sampler.start()
    profiler: Profiler | None = None
    if scenario.name in ctx.profile or scenario.kind in ctx.profile:
        start_s = profile_start_s(scenario.workload) + 1.5
        profiler = Profiler(nodes[0].pid, start_s, ctx.profile_seconds, sdir / "profile-node0.raw")
        profiler.start()
    started = time.monotonic()
    background: subprocess.Popen[bytes] | None = None
    try:
        if background_argv is not None:
            background = launch(
                background_argv,
                log_path=sdir / "harness-background.log",
                env=clean_env(),
                death_signal=signal.SIGTERM,
            )
        harness = launch(
            argv,
            log_path=sdir / "harness.log",
            env=clean_env(),
            death_signal=signal.SIGTERM,
        )
        for proc in (background, harness):
            if proc is not None:
                pin_tree(proc.pid, harness_cpus)
        code = wait_child(harness, f"the load of {scenario.name}")
        if background is not None:
            code = code or wait_child(background, f"the background load of {scenario.name}")
    finally:
        elapsed = time.monotonic() - started
        if background is not None and background.poll() is None:
            background.kill()
            background.wait()
        cpu_after = cpu_snapshot(trees, stack.postgres_pids, stack.broker_pid)
        sampler_postgres = sampler.postgres_cpu_s
        pg_after = pgstats.snapshot_shards(stack.shard_sqls(), stack.postgres_pids)
        metrics_after = [n.metrics_text() for n in nodes]
        hwm = {n.index: tree_hwm_kb(n.pid) for n in nodes}
        if profiler is not None:
            profiler.stop()
        sampler.stop()
        exit_codes = stack.stop_nodes()
    return LoadRun(
        returncode=code,
        elapsed=elapsed,
        load_before=load_before,
        cpu=cpu_delta(cpu_before, cpu_after, sampler_postgres, postgres_idle),
        postgres=(pg_before, pg_after),
        metrics_before=metrics_before,
        metrics_after=metrics_after,
        hwm_kb=hwm,
        exit_codes=exit_codes,
        sampler=sampler,
        profiler=profiler,
    )


def record_load(
    rec: dict[str, Any], load: LoadRun, nodes: Sequence[NodeProcess], sdir: Path
) -> None:
    """The load's figures into the record; the scrapes and the samples into ``sdir``."""
    rec["harness"] = {"returncode": load.returncode, "elapsed_s": round(load.elapsed, 1)}
    rec["loadavg"] = {
        "start": [round(x, 2) for x in load.load_before],
        "end": [round(x, 2) for x in os.getloadavg()],
    }
    rec["cpu"] = load.cpu.as_dict()
    pairs = zip(load.metrics_before, load.metrics_after, strict=True)
    for i, (first, text) in enumerate(pairs):
        (sdir / f"metrics-before-node{i}.txt").write_text(first)
        (sdir / f"metrics-node{i}.txt").write_text(text)
    nm = node_metrics(load.metrics_before, load.metrics_after, load.elapsed)
    rec["claim"] = nm.claim.as_dict()
    rec["statements"] = nm.statements_dict()
    rec["node_counters"] = dict(nm.counters)
    rec["node_lateness"] = nm.node_lateness.as_dict()
    sampled = load.sampler.rss_max_kb
    rec["nodes_stats"] = [
        {
            "index": n.index,
            "pid": n.pid,
            "rss_max_mb": round(
                max(sampled.get(n.index, 0), load.hwm_kb.get(n.index) or 0) / 1024, 1
            ),
            "rss_sampled_max_mb": round(sampled.get(n.index, 0) / 1024, 1),
            "cpu_s": load.cpu.per_node_s.get(str(n.index)),
            "exit_code": load.exit_codes.get(n.index),
        }
        for n in nodes
    ]
    rec["rss_max_mb"] = max((s["rss_max_mb"] for s in rec["nodes_stats"]), default=None)
    samples = [s.as_dict() for s in load.sampler.samples]
    (sdir / "samples.json").write_text(json.dumps(samples) + "\n")
    if load.sampler.stalls:
        rec["stalls"] = [s.as_dict() for s in load.sampler.stalls]
    if load.profiler is not None:
        rec["profile"] = finish_profile(load.profiler, sdir).as_dict()
