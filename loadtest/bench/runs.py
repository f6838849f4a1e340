"""Running one scenario: the ceiling, or a load against fresh nodes (or the echo relay) with
the sampler, the profiler and the analysis around it."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from loadtest.analysis.delivery import STORED_COUNT_SQL, locate_loss
from loadtest.bench import pgstats
from loadtest.bench import scenarios as sc
from loadtest.bench.figures import fill_from_summary, received_gaps
from loadtest.bench.input_audit import audit_input
from loadtest.bench.pgstats import PgSnapshot
from loadtest.bench.pinning import PinPlan, own_cpus, pin_tree, plan_pinning
from loadtest.bench.procstats import TreeCpu, cpu_delta, cpu_per_message, cpu_snapshot, tree_hwm_kb
from loadtest.bench.profiles import Profiler, finish_profile
from loadtest.bench.promtext import node_metrics
from loadtest.bench.results.cpu import CpuUsage
from loadtest.bench.results.samples import StackSample
from loadtest.bench.sampling import Sampler
from loadtest.bench.scenarios import Scenario, Workload
from loadtest.bench.stack import NodeProcess, Stack, Topics, clean_env, launch


class Interrupted(Exception):
    """Ctrl-C or SIGTERM."""


@dataclass
class Context:
    out: Path
    stack: Stack
    quick: bool
    profile: set[str]
    profile_seconds: float
    analyze_memory: str = "4g"


def say(message: str) -> None:
    stamp = datetime.now().strftime("%H:%M:%S")
    print(f"bench {stamp} {message}", file=sys.stderr, flush=True)


def run_ceiling_scenario(ctx: Context, scenario: Scenario) -> dict[str, Any]:
    from loadtest.bench.ceiling import run_ceiling

    sdir = ctx.out / scenario.name
    sdir.mkdir(parents=True, exist_ok=True)
    tag = f"[{scenario.name}]"
    say(f"{tag} the node's store statements on this Postgres for {scenario.ceiling_seconds:g} s")
    result = run_ceiling(
        ctx.stack.url,
        seconds=scenario.ceiling_seconds,
        warmup=scenario.ceiling_warmup_s,
        environ=ctx.stack.node_env,
        postgres_pid=ctx.stack.postgres_pid,
    )
    data = asdict(result)
    (sdir / "ceiling.json").write_text(json.dumps(data, indent=2) + "\n")
    say(
        f"{tag} {result.ceiling_msg_per_s:,.0f} msg/s (claim {result.claim_ms_avg} ms, "
        f"delete {result.delete_ms_avg} ms, enqueue {result.insert_ms_avg} ms per "
        f"{result.batch:,} rows, through the node's store)"
    )
    cpu = ceiling_cpu(result.seconds, result.client_cpu_s, result.postgres_cpu_s)
    return {
        **scenario.as_dict(),
        "status": "ok",
        "result": data,
        "cpu": cpu.as_dict(),
        "cpu_per_message": cpu_per_message(cpu, result.deleted).as_dict(),
        "files": {"ceiling.json": f"{scenario.name}/ceiling.json"},
    }


def ceiling_cpu(seconds: float, client_s: float | None, postgres_s: float | None) -> CpuUsage:
    """The ceiling's CPU in its measured window, as a load's: the process driving the store
    stands where the nodes do (it runs their statements, without Kafka), and there is no
    broker."""
    return CpuUsage(
        wall_s=round(seconds, 2),
        nodes_s=None if client_s is None else round(client_s, 2),
        postgres_s=None if postgres_s is None else round(postgres_s, 2),
        broker_s=None,
    )


def _offered_rate(scenario: Scenario, ceiling: float | None) -> float:
    assert scenario.workload is not None
    if scenario.workload.rate_from_ceiling:
        return (
            float(round(sc.SATURATE_FACTOR * ceiling, -2)) if ceiling else 2.0 * sc.SUSTAINED_RATE
        )
    return scenario.workload.rate


def _profile_start_s(w: Workload) -> float:
    window = w.steady_window_s()
    if window is not None:
        return window[0] + 1.0
    low, _, _ = w.delay_bounds_s()
    return max(0.0, low - 1.0) if w.is_burst() else low


def _wait_child(proc: subprocess.Popen[bytes], what: str) -> int:
    """Wait for a child; on Ctrl-C give it SIGINT (the load generator still writes its
    files), then kill it if it lingers."""
    try:
        return proc.wait()
    except KeyboardInterrupt:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise Interrupted(f"interrupted during {what}") from None


def run_load_scenario(ctx: Context, scenario: Scenario, ceiling: float | None) -> dict[str, Any]:
    """One load against fresh nodes: its record for bench.json (``status`` ok), or an error."""
    assert scenario.workload is not None
    w = scenario.workload
    sdir = ctx.out / scenario.name
    sdir.mkdir(parents=True, exist_ok=True)
    rate = _offered_rate(scenario, ceiling)
    rec: dict[str, Any] = {
        **scenario.as_dict(),
        "status": "running",
        "offered_rate": rate,
        "load": w.describe(rate),
    }
    tag = f"[{scenario.name}]"
    topics, nodes = _start(ctx.stack, scenario, sdir, rec)
    rec["node_pids"] = [n.pid for n in nodes]
    say(
        f"{tag} {len(nodes)} node(s) ready (pid {', '.join(str(n.pid) for n in nodes)}); "
        f"sending {w.describe(rate)}"
    )
    events = sdir / "events"
    advance = int(nodes[0].settings.timing_advance_ms)
    harness_argv = _harness_argv(ctx.stack, topics, w, rate, advance, events)
    rec["harness_command"] = "python " + shlex.join(harness_argv)
    background_argv = None
    if w.background is not None:
        bg = w.background
        background_argv = [
            *_harness_argv(ctx.stack, topics, bg, bg.rate, advance, sdir / "background"),
            "--produce-only",
        ]
        rec["background_command"] = "python " + shlex.join(background_argv)
    pins = _pin(ctx.stack, scenario, nodes)
    if pins is not None:
        rec["pinning"] = pins.as_dict()
        say(f"{tag} {pins.describe()}")
    try:
        load = _run_load(
            ctx,
            scenario,
            sdir,
            nodes,
            harness_argv,
            background_argv,
            () if pins is None else pins.load_generator,
        )
    finally:
        if pins is not None and pins.pinned:
            everywhere = own_cpus()
            pin_tree(ctx.stack.postgres_pid, everywhere)
            pin_tree(ctx.stack.broker_pid, everywhere)
    _record_load(rec, load, nodes, sdir)
    if load.sampler.stalls:
        say(f"{tag} node stalled: see {', '.join(s.file for s in load.sampler.stalls)}")
    if load.returncode != 0:
        raise RuntimeError(
            f"the load generator exited with {load.returncode}; see {sdir / 'harness.log'}"
        )

    say(f"{tag} load done in {load.elapsed:.0f} s; analysing")
    summary, run = _analyse(ctx, scenario.name, events, sdir)
    fill_from_summary(rec, scenario, summary, run, load.sampler.samples, rate)
    handled = int(run.get("producer", {}).get("sent") or 0)
    if background_argv is not None:
        bg_run = json.loads((sdir / "background" / "run.json").read_text())
        rec["background"] = bg_run.get("producer", {})
        handled += int(rec["background"].get("sent") or 0)
        # The background's messages are due long after the run: every one must be in the table
        # (intake loses none), counted by its run id.
        rec["background"]["stored"] = _stored(ctx.stack, str(bg_run.get("run_id")))
    rec["cpu_per_message"] = cpu_per_message(load.cpu, handled).as_dict()
    pg_before, pg_after = load.postgres
    if pg_before is not None and pg_after is not None:
        rec["postgres_breakdown"] = pgstats.breakdown(pg_before, pg_after, handled).as_dict()
    _locate_loss(rec, ctx.stack, run, events)
    _audit_input(rec, ctx.stack, topics, summary, run, sdir)
    rec["files"] = _files(scenario.name, sdir)
    _plot_stack(sdir / "stack.png", load.sampler.samples, run, scenario)
    if (sdir / "stack.png").exists():
        rec["files"]["stack timeline"] = f"{scenario.name}/stack.png"
    rec["status"] = "ok"
    return rec


def _start(
    stack: Stack, scenario: Scenario, sdir: Path, rec: dict[str, Any]
) -> tuple[Topics, list[NodeProcess]]:
    """An empty broker and table (pre-loaded if the scenario says so), then its nodes, ready."""
    tag = f"[{scenario.name}]"
    stack.fresh_broker()
    topics = stack.topics(scenario.name)
    stack.reset_table()
    if scenario.preload_rows:
        say(f"{tag} pre-loading {scenario.preload_rows:,} far-future rows")
        preload = stack.preload(scenario.preload_rows)
        rec["preload"] = preload.as_dict()
        say(f"{tag} pre-loaded in {preload.seconds} s ({preload.table_mb or 0:,.0f} MB)")
    if scenario.kind == "relay":
        return topics, [stack.start_relay(topics, sdir)]
    nodes = stack.start_nodes(scenario.nodes, topics, sdir)
    stack.wait_ready(nodes, topics)
    return topics, nodes


def _pin(stack: Stack, scenario: Scenario, nodes: Sequence[NodeProcess]) -> PinPlan | None:
    """A scenario that asks for pinning (``scaling``): the plan for its curve's largest node
    count, applied to Postgres, the broker and this run's nodes when the machine has the CPUs
    (the load generator is pinned when it starts)."""
    most = scenario.extra.get("pin_nodes")
    if not most:
        return None
    plan = plan_pinning(own_cpus(), int(most))
    if plan.pinned:
        pin_tree(stack.postgres_pid, plan.postgres)
        pin_tree(stack.broker_pid, plan.broker)
        for node in nodes:
            pin_tree(node.pid, plan.for_node(node.index))
    return plan


def _harness_argv(
    stack: Stack, topics: Topics, w: Workload, rate: float, advance: int, events: Path
) -> list[str]:
    """``python -m loadtest run`` for this load, recording into ``events``."""
    return [
        "-m",
        "loadtest",
        "run",
        "--bootstrap",
        stack.bootstrap,
        "--input-topic",
        topics.input,
        "--output-topic",
        topics.output,
        "--dead-letter-topic",
        topics.dead_letter,
        *w.harness_args(rate),
        "--timing-advance-ms",
        str(advance),
        "--seed",
        "1",
        "--out",
        str(events),
    ]


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


def _run_load(
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
    metrics_before = [n.metrics_text() for n in nodes]
    trees = {n.index: TreeCpu(n.pid) for n in nodes}
    pg_before = pgstats.snapshot(stack.sql, stack.postgres_pid)
    cpu_before = cpu_snapshot(trees, stack.postgres_pid, stack.broker_pid)
    load_before = os.getloadavg()
    sampler = Sampler(stack.url, nodes, stall_dir=sdir, cpu_trees=list(trees.values()))
    sampler.start()
    profiler: Profiler | None = None
    if scenario.name in ctx.profile or scenario.kind in ctx.profile:
        start_s = _profile_start_s(scenario.workload) + 1.5
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
        code = _wait_child(harness, f"the load of {scenario.name}")
        if background is not None:
            code = code or _wait_child(background, f"the background load of {scenario.name}")
    finally:
        elapsed = time.monotonic() - started
        if background is not None and background.poll() is None:
            background.kill()
            background.wait()
        cpu_after = cpu_snapshot(trees, stack.postgres_pid, stack.broker_pid)
        sampler_postgres = sampler.postgres_cpu_s
        pg_after = pgstats.snapshot(stack.sql, stack.postgres_pid)
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
        cpu=cpu_delta(cpu_before, cpu_after, sampler_postgres),
        postgres=(pg_before, pg_after),
        metrics_before=metrics_before,
        metrics_after=metrics_after,
        hwm_kb=hwm,
        exit_codes=exit_codes,
        sampler=sampler,
        profiler=profiler,
    )


def _record_load(
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


def _analyse(
    ctx: Context, name: str, events: Path, sdir: Path
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``python -m loadtest analyze`` on the recorded events: its summary and the run.json."""
    analyze_argv = [
        "-m",
        "loadtest",
        "analyze",
        str(events),
        "--out",
        str(sdir),
        "--driver-memory",
        ctx.analyze_memory,
    ]
    analysis = launch(
        analyze_argv, log_path=sdir / "analyze.log", env=clean_env(), death_signal=signal.SIGTERM
    )
    acode = _wait_child(analysis, f"the analysis of {name}")
    if acode != 0:
        raise RuntimeError(f"the analysis exited with {acode}; see {sdir / 'analyze.log'}")
    summary = json.loads((sdir / "summary.json").read_text())
    run = json.loads((events / "run.json").read_text())
    return summary, run


def _stored(stack: Stack, run_id: str) -> int | None:
    """Rows of run ``run_id`` in the table (None if the count failed)."""
    try:
        return int(stack.sql(STORED_COUNT_SQL, {"prefix": f"{run_id}-"})[0][0])
    except Exception:  # noqa: BLE001 - a diagnostic; the other figures stand without it
        return None


STORED_IDS_SQL = "SELECT id FROM chronos_messages WHERE starts_with(id, %(prefix)s)"


def _audit_input(
    rec: dict[str, Any],
    stack: Stack,
    topics: Topics,
    summary: dict[str, Any],
    run: dict[str, Any],
    sdir: Path,
) -> None:
    """When messages are missing (lost, or the intake load's rows absent from the table): does
    the input topic hold them, and where (``input_audit``)."""
    missing = [str(i) for i in (summary.get("counts") or {}).get("lost_sample") or []]
    runs = {str(run.get("run_id")): int(run.get("producer", {}).get("sent") or 0)}
    background = rec.get("background") or {}
    sent, stored = int(background.get("sent") or 0), background.get("stored")
    if sent and stored is not None and stored < sent:
        bg_id = str(json.loads((sdir / "background" / "run.json").read_text()).get("run_id"))
        runs[bg_id] = sent
        held = {str(r[0]) for r in stack.sql(STORED_IDS_SQL, {"prefix": f"{bg_id}-"})}
        missing += [i for i in (f"{bg_id}-{n}" for n in range(sent)) if i not in held][:1000]
    if missing:
        rec["input_audit"] = audit_input(
            stack.bootstrap, topics.input, stack.partitions, runs, missing
        )
        say(
            f"[{rec.get('name')}] input audit: {rec['input_audit']['missing_held']} of the "
            f"missing messages are in the input topic, "
            f"{rec['input_audit']['missing_not_held']} are not"
        )


def _locate_loss(rec: dict[str, Any], stack: Stack, run: dict[str, Any], events: Path) -> None:
    """When messages were lost: holes in the output offsets, rows still in the table."""
    lost = int(rec["summary"]["counts"].get("lost") or 0)
    if lost and not run.get("consumer", {}).get("foreign_records"):
        gaps = received_gaps(events / "received.parquet")
        rec["output_gaps"] = None if gaps is None else gaps.as_dict()
    if lost:
        rec["loss_location"] = locate_loss(
            lost, stack.sql, str(run.get("run_id")), rec.get("output_gaps")
        ).as_dict()


def _files(name: str, sdir: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    for label, filename in (
        ("report", "report.html"),
        ("summary", "summary.json"),
        ("lateness CDF", "lateness_cdf.png"),
        ("lateness histogram", "lateness_hist.png"),
        ("throughput", "throughput.png"),
        ("samples", "samples.json"),
        ("profile", "profile-node0.txt"),
        ("intake profile", "profile-intake0.txt"),
        ("load generator log", "harness.log"),
    ):
        if (sdir / filename).exists():
            files[label] = f"{name}/{filename}"
    if (sdir / "relay.log").exists():
        files["relay log"] = f"{name}/relay.log"
    for log in sorted(sdir.glob("node-*.log")):
        files[log.stem + " log"] = f"{name}/{log.name}"
    for stall in sorted(sdir.glob("stall-node*.txt")):
        files[stall.stem] = f"{name}/{stall.name}"
    return files


def _plot_stack(
    path: Path, samples: Sequence[StackSample], run: dict[str, Any], scenario: Scenario
) -> None:
    if not samples:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    start = int(run.get("start_ms") or samples[0].t_ms)
    end = run.get("producer", {}).get("end_ms")
    xs = [(s.t_ms - start) / 1000 for s in samples]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    series: tuple[tuple[str, Callable[[StackSample], float | None]], ...] = (
        ("waiting rows", lambda s: None if s.table is None else s.table.waiting),
        ("claimed rows", lambda s: None if s.table is None else s.table.claimed),
        ("overdue rows", lambda s: s.overdue),
        ("consumer lag", lambda s: s.consumer_lag),
    )
    for label, value in series:
        ys = [value(s) for s in samples]
        if any(y is not None for y in ys):
            ax.plot(xs, [float("nan") if y is None else y for y in ys], label=label)
    ax.set_xlabel("seconds since the first send")
    ax.set_ylabel("messages")
    if end:
        ax.axvline((int(end) - start) / 1000, color="grey", linestyle="--", linewidth=1)
    ax2 = ax.twinx()
    for i in range(scenario.nodes):
        ys = [s.rss_mb.get(i) for s in samples]
        ax2.plot(
            xs,
            [float("nan") if y is None else y for y in ys],
            linestyle=":",
            label=f"node {i} memory MB (PSS)",
        )
    ax2.set_ylabel("memory MB (PSS)")
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    ax.legend(handles, labels, loc="upper left", fontsize="small")
    ax.set_title(f"{scenario.name}: table, lag and node memory (dashed: end of sending)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
