"""The ``scaling`` scenario: its plan, the CPU pinning plan and its application, and its
figures in ``bench.json`` and ``BENCHMARK.md`` from canned records (no load is run)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadtest.bench import driver, pinning
from loadtest.bench import scenarios as sc
from loadtest.bench.pinning import pin_tree, plan_pinning
from loadtest.bench.records import BenchRecord
from loadtest.bench.report import render_markdown
from loadtest.bench.results.cpu import CpuUsage
from loadtest.bench.scaling import budget_note, scaling_points

from .canned import scenario_record


@pytest.mark.parametrize("quick", [False, True])
def test_scaling_plan_runs_one_to_three_nodes_saturated(quick: bool) -> None:
    runs = sc.plan(["scaling"], quick=quick)
    scaling = [r for r in runs if r.kind == "scaling"]
    assert [(r.name, r.nodes) for r in scaling] == [
        ("scaling-1", 1),
        ("scaling-2", 2),
        ("scaling-3", 3),
    ]
    assert runs[0].name == "ceiling" and runs[-1].name == "ceiling-end"
    for run in scaling:
        assert run.workload is not None and run.workload.rate_from_ceiling
        assert run.extra["pin_nodes"] == 3  # one pinning plan for the whole curve
        assert run.workload.send_seconds == (10 if quick else 60)
    assert "scaling" not in sc.DEFAULT_SCENARIOS  # asked for by name: it adds three runs


def test_pinning_gives_each_component_cpus_of_its_own() -> None:
    plan = plan_pinning(range(16), 3)
    assert plan.pinned and plan.needed == 7
    assert plan.postgres == (0, 1) and plan.broker == (2,) and plan.load_generator == (3,)
    assert plan.node_cpus == ((4,), (5,), (6,))
    used = [*plan.postgres, *plan.broker, *plan.load_generator]
    used += [c for cpus in plan.node_cpus for c in cpus]
    assert len(used) == len(set(used))  # nothing shared
    assert plan.for_node(2) == (6,) and plan.for_node(3) == ()
    assert "Postgres CPU 0,1" in plan.describe() and "node 2: CPU 6" in plan.describe()
    # Exactly enough, from a sparse affinity (a container's cpuset).
    assert plan_pinning([3, 5, 8, 9, 10, 11, 12], 3).node_cpus == ((10,), (11,), (12,))


def test_too_few_cpus_pins_nothing_and_says_so() -> None:
    plan = plan_pinning([0, 1], 3)
    assert not plan.pinned and plan.needed == 7
    assert plan.postgres == () and plan.for_node(0) == ()
    assert plan.describe().startswith("not pinned: 2 CPUs;")
    assert "need 7" in plan.describe()
    assert plan.as_dict()["pinned"] is False
    assert not plan_pinning(range(6), 3).pinned  # one short


def test_pin_tree_pins_a_process_and_its_threads() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    child = subprocess.Popen(
        [sys.executable, "-c", "import threading, time\n"
         "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
         "time.sleep(60)"]
    )  # fmt: skip
    try:
        assert pin_tree(child.pid, cpus[:1]) >= 1
        assert os.sched_getaffinity(child.pid) == {cpus[0]}
        assert pin_tree(child.pid, ()) == 0  # no CPUs: left alone
        assert pin_tree(None, cpus) == 0
    finally:
        child.kill()
        child.wait()
    assert pinning.own_cpus() == tuple(cpus)


def _scaling(nodes: int, fired: float, util: float, pinned: bool) -> dict[str, Any]:
    cpu = CpuUsage(
        wall_s=20.0,
        nodes_s=10.0 * nodes,
        postgres_s=6.0,
        broker_s=8.0,
        harness_s=4.0,
        other_s=1.0,
        machine_util=util,
    )
    plan = plan_pinning(range(16) if pinned else [0, 1], 3)
    return scenario_record(
        f"scaling-{nodes}",
        "scaling",
        nodes=nodes,
        offered_rate=30_000.0,
        steady={"fired_per_s": fired},
        backlog={"growing": True},
        cpu=cpu.as_dict(),
        cpu_per_message={"messages": 600_000},
        pinning=plan.as_dict(),
        summary={"counts": {"sent": 600_000, "fired_distinct": 590_000, "lost": 10_000}},
    )


def _bench(*recs: dict[str, Any]) -> dict[str, Any]:
    return {
        "command": "python -m loadtest bench --scenarios scaling",
        "machine": {"cores": 2},
        "scenarios": [
            {"name": "ceiling", "kind": "ceiling", "status": "ok", "result": {}},
            *recs,
        ],
    }


def test_curve_on_a_machine_without_the_cpus(tmp_path: Path) -> None:
    bench = _bench(
        _scaling(2, 12_000.0, 0.97, pinned=False),
        _scaling(1, 10_000.0, 0.85, pinned=False),
        _scaling(3, 12_500.0, 0.99, pinned=False),
    )
    driver.write_outputs(tmp_path, bench)
    record = BenchRecord.from_dict(bench)
    points = scaling_points(record)
    assert [(p.nodes, p.speedup) for p in points] == [(1, 1.0), (2, 1.2), (3, 1.25)]
    assert [p.node_cores for p in points] == [0.5, 1.0, 1.5]
    assert points[0].postgres_cores == 0.3 and points[0].load_generator_cores == 0.2
    note = budget_note(points, 2)
    assert note.startswith("Not pinned: 2 CPUs;")
    assert "all 2 CPUs at least 90% busy with 2 nodes, 3 nodes" in note
    md = (tmp_path / "BENCHMARK.md").read_text()
    assert "### Scaling: nodes against one Postgres" in md
    assert (
        "| 2 | 30,000 | 12,000 | 1.20 | 1.00 | 0.30 | 0.40 | 0.20 | 0.05 | 97% | "
        "100,000 | 30,000 | 75,000 |"
    ) in md
    assert "CPU budget" in md
    rows = {r["scenario"]: r for r in bench["targets"]}
    assert rows["scaling"]["measured"] == (
        "1: 10,000 msg/s (x1.00), 2: 12,000 msg/s (x1.20), 3: 12,500 msg/s (x1.25)"
    )
    assert rows["scaling"]["pass"] is None
    assert rows["scaling"]["note"] == "not pinned: CPUs shared"
    # Offered more than it takes: its drain outlasts the load generator, so its losses are not
    # judged (as saturate's).
    lost = [r for r in bench["targets"] if r["target"].startswith("no message lost")]
    assert all("scaling-" not in r["measured"] and r["pass"] is not False for r in lost)


def test_curve_on_a_machine_with_the_cpus() -> None:
    record = BenchRecord.from_dict(
        _bench(_scaling(1, 10_000.0, 0.5, pinned=True), _scaling(3, 29_000.0, 0.8, pinned=True))
    )
    points = scaling_points(record)
    assert [p.speedup for p in points] == [1.0, 2.9]
    note = budget_note(points, 16)
    assert note.startswith("Pinned: Postgres CPU 0,1") and "CPU budget" not in note
    md = render_markdown(record)
    assert "| 3 | 30,000 | 29,000 | 2.90 |" in md


def test_no_curve_without_scaling_runs() -> None:
    record = BenchRecord.from_dict(_bench())
    assert scaling_points(record) == []
    assert "Scaling" not in render_markdown(record)
