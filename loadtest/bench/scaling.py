"""The ``scaling`` curve: 1, 2 and 3 nodes against one Postgres, each offered more than one
node takes. Per node count: the steady fired rate (the capacity of that many nodes), its ratio
to one node's, the cores each component used, messages per core-second, and whether the
components had CPUs of their own; on a machine where they could not, the CPU budget the run
had to share out."""

from __future__ import annotations

from dataclasses import dataclass

from loadtest.analysis.delivery import Row
from loadtest.bench.records import BenchRecord
from loadtest.bench.results.cpu import PerCore

SATURATED_UTIL = 0.9
"""A run whose machine was busy at least this fraction of all its CPUs had no CPU to spare:
another node could only take CPU from the rest."""


@dataclass(frozen=True)
class ScalingPoint:
    name: str
    nodes: int
    offered_per_s: float | None
    fired_per_s: float | None  # steady fired rate: the capacity of ``nodes`` nodes
    speedup: float | None  # fired_per_s / that of the fewest nodes measured
    node_cores: float | None
    postgres_cores: float | None
    broker_cores: float | None
    load_generator_cores: float | None
    other_cores: float | None
    machine_util: float | None  # busy fraction of all the machine's CPUs
    per_core: PerCore | None
    pinned: bool | None
    pinning: str | None


def _cores(seconds: float | None, wall: float | None) -> float | None:
    return None if seconds is None or not wall else round(seconds / wall, 2)


def scaling_points(bench: BenchRecord) -> list[ScalingPoint]:
    """The curve's points in node order (the runs that completed)."""
    recs = sorted(
        (r for r in bench.by_kind("scaling") if r.ok and r.nodes), key=lambda r: r.nodes or 0
    )
    base = next((r.steady.fired_per_s for r in recs if r.steady is not None), None)
    points = []
    for rec in recs:
        fired = None if rec.steady is None else rec.steady.fired_per_s
        cpu = rec.cpu
        wall = None if cpu is None else cpu.wall_s
        points.append(
            ScalingPoint(
                name=rec.name,
                nodes=rec.nodes or 0,
                offered_per_s=rec.offered_rate,
                fired_per_s=fired,
                speedup=round(fired / base, 2) if fired is not None and base else None,
                node_cores=None if cpu is None else _cores(cpu.nodes_s, wall),
                postgres_cores=None if cpu is None else _cores(cpu.postgres_s, wall),
                broker_cores=None if cpu is None else _cores(cpu.broker_s, wall),
                load_generator_cores=None if cpu is None else _cores(cpu.harness_s, wall),
                other_cores=None if cpu is None else _cores(cpu.other_s, wall),
                machine_util=None if cpu is None else cpu.machine_util,
                per_core=rec.per_core,
                pinned=rec.pinned,
                pinning=rec.pinning,
            )
        )
    return points


def budget_note(points: list[ScalingPoint], cores: int | None) -> str:
    """What the curve can say on this machine: pinned or not, and whether the machine's CPUs
    were all busy (then another node only shares out the same CPU)."""
    if not points:
        return ""
    notes = []
    pinning = next((p.pinning for p in points if p.pinning), None)
    if pinning:
        notes.append(pinning[0].upper() + pinning[1:] + ".")
    busy = [p for p in points if p.machine_util is not None and p.machine_util >= SATURATED_UTIL]
    if busy:
        cpus = f"all {cores} CPUs" if cores else "all the CPUs"
        runs = ", ".join(f"{p.nodes} node{'s' if p.nodes > 1 else ''}" for p in busy)
        notes.append(
            f"CPU budget: the machine kept {cpus} at least {SATURATED_UTIL:.0%} busy with "
            f"{runs}; what a node added there was CPU taken from Postgres, the broker and "
            "the load generator, so the ratios are a floor of what another node adds on a "
            "machine with the CPUs to spare."
        )
    return " ".join(notes)


def scaling_rows(bench: BenchRecord) -> list[Row]:
    """The curve in the targets table: reported, not judged (the machine decides how much
    another node can add; ``budget_note`` says how much it could)."""
    points = [p for p in scaling_points(bench) if p.fired_per_s is not None]
    if not points:
        return []
    measured = ", ".join(
        f"{p.nodes}: {p.fired_per_s:,.0f} msg/s"
        + ("" if p.speedup is None else f" (x{p.speedup:.2f})")
        for p in points
    )
    pinned = next((p.pinned for p in points if p.pinned is not None), None)
    note = {True: "pinned", False: "not pinned: CPUs shared", None: ""}[pinned]
    return [Row("scaling", "steady fired rate by node count, one Postgres", measured, None, note)]
