"""Running one scenario: the ceiling, or a load against fresh nodes (or the echo relay) with
the sampler, the profiler and the analysis around it (``measure`` runs the load, ``outcome``
reads what it left)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from loadtest.bench import pgstats
from loadtest.bench import scenarios as sc
from loadtest.bench.context import Context, Interrupted, say
from loadtest.bench.figures import fill_from_summary
from loadtest.bench.measure import record_load, run_load
from loadtest.bench.outcome import (
    analyse,
    audit_missing,
    locate_lost,
    plot_stack,
    scenario_files,
    stored_rows,
)
from loadtest.bench.pinning import PinPlan, own_cpus, pin_tree, plan_pinning
from loadtest.bench.procstats import cpu_per_message
from loadtest.bench.results.cpu import CpuUsage
from loadtest.bench.scenarios import Scenario, Workload
from loadtest.bench.stack import NodeProcess, Stack, Topics

__all__ = [
    "Context",
    "Interrupted",
    "ceiling_cpu",
    "run_ceiling_scenario",
    "run_load_scenario",
    "say",
]


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
        load = run_load(
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
            for pid in ctx.stack.postgres_pids:
                pin_tree(pid, everywhere)
            pin_tree(ctx.stack.broker_pid, everywhere)
    record_load(rec, load, nodes, sdir)
    if load.sampler.stalls:
        say(f"{tag} node stalled: see {', '.join(s.file for s in load.sampler.stalls)}")
    if load.returncode != 0:
        raise RuntimeError(
            f"the load generator exited with {load.returncode}; see {sdir / 'harness.log'}"
        )

    say(f"{tag} load done in {load.elapsed:.0f} s; analysing")
    summary, run = analyse(ctx, scenario.name, events, sdir)
    fill_from_summary(rec, scenario, summary, run, load.sampler.samples, rate)
    handled = int(run.get("producer", {}).get("sent") or 0)
    if background_argv is not None:
        bg_run = json.loads((sdir / "background" / "run.json").read_text())
        rec["background"] = bg_run.get("producer", {})
        handled += int(rec["background"].get("sent") or 0)
        # The background's messages are due long after the run: every one must be in the table
        # (intake loses none), counted by its run id.
        rec["background"]["stored"] = stored_rows(ctx.stack, str(bg_run.get("run_id")))
    rec["cpu_per_message"] = cpu_per_message(load.cpu, handled).as_dict()
    pg_before, pg_after = load.postgres
    if pg_before is not None and pg_after is not None:
        rec["postgres_breakdown"] = pgstats.breakdown(pg_before, pg_after, handled).as_dict()
    locate_lost(rec, ctx.stack, run, events)
    audit_missing(rec, ctx.stack, topics, summary, run, sdir)
    rec["files"] = scenario_files(scenario.name, sdir)
    plot_stack(sdir / "stack.png", load.sampler.samples, run, scenario)
    if (sdir / "stack.png").exists():
        rec["files"]["stack timeline"] = f"{scenario.name}/stack.png"
    rec["status"] = "ok"
    return rec


def _start(
    stack: Stack, scenario: Scenario, sdir: Path, rec: dict[str, Any]
) -> tuple[Topics, list[NodeProcess]]:
    """A broker without the topics before, an empty table (pre-loaded if the scenario says
    so), then its nodes, ready."""
    tag = f"[{scenario.name}]"
    stack.clear_broker()
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
        for pid in stack.postgres_pids:
            pin_tree(pid, plan.postgres)
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
