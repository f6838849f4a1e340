"""Process and machine statistics: a process's RSS and CPU time, a process tree's CPU time
(Postgres and its backends) and the CPU each component used during a load."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loadtest.bench.stack import NodeProcess, Stack


def parse_status_kb(status_text: str, field_name: str = "VmRSS") -> int | None:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``)."""
    for line in status_text.splitlines():
        if line.startswith(field_name + ":"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1])
    return None


@dataclass(frozen=True)
class ProcStat:
    ppid: int
    ticks: int  # utime + stime
    child_ticks: int  # cutime + cstime (reaped children)


def parse_proc_stat(stat_text: str) -> ProcStat:
    """``/proc/<pid>/stat``: the command may contain spaces and parentheses, so split after the
    last ')'; fields 4 (ppid), 14-17 (utime, stime, cutime, cstime)."""
    fields = stat_text.rpartition(")")[2].split()
    return ProcStat(
        ppid=int(fields[1]),
        ticks=int(fields[11]) + int(fields[12]),
        child_ticks=int(fields[13]) + int(fields[14]),
    )


def parse_machine_cpu(proc_stat_text: str) -> tuple[int, int]:
    """(busy, total) ticks of all CPUs from the first line of ``/proc/stat``."""
    first = proc_stat_text.splitlines()[0].split()
    values = [int(v) for v in first[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already counted in user
    return total - idle, total


def read_text(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def rss_kb(pid: int) -> int | None:
    text = read_text(f"/proc/{pid}/status")
    return None if text is None else parse_status_kb(text, "VmRSS")


def hwm_kb(pid: int) -> int | None:
    text = read_text(f"/proc/{pid}/status")
    return None if text is None else parse_status_kb(text, "VmHWM")


def proc_stat(pid: int) -> ProcStat | None:
    text = read_text(f"/proc/{pid}/stat")
    try:
        return None if text is None else parse_proc_stat(text)
    except (IndexError, ValueError):
        return None


def _tree_ticks(root: int | None) -> int:
    """CPU ticks of ``root``, its reaped children and its live children (Postgres backends)."""
    if root is None:
        return 0
    top = proc_stat(root)
    if top is None:
        return 0
    ticks = top.ticks + top.child_ticks
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == root:
            continue
        st = proc_stat(int(entry.name))
        if st is not None and st.ppid == root:
            ticks += st.ticks + st.child_ticks
    return ticks


@dataclass
class CpuSnapshot:
    wall: float
    nodes: dict[int, int]
    postgres: int
    broker: int
    machine_busy: int
    children_s: float  # reaped children of this process (the load generator)


def cpu_snapshot(stack: Stack, nodes: Sequence[NodeProcess]) -> CpuSnapshot:
    text = read_text("/proc/stat") or "cpu 0 0 0 0"
    busy, _ = parse_machine_cpu(text)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return CpuSnapshot(
        wall=time.monotonic(),
        nodes={n.index: (st.ticks if (st := proc_stat(n.pid)) else 0) for n in nodes},
        postgres=_tree_ticks(stack.postgres_pid),
        broker=_tree_ticks(stack.broker_pid),
        machine_busy=busy,
        children_s=usage.ru_utime + usage.ru_stime,
    )


def cpu_delta(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, Any]:
    hz = os.sysconf("SC_CLK_TCK")
    nodes = {i: (after.nodes.get(i, 0) - before.nodes.get(i, 0)) / hz for i in after.nodes}
    nodes_s = sum(nodes.values())
    pg = (after.postgres - before.postgres) / hz
    broker = (after.broker - before.broker) / hz
    harness = after.children_s - before.children_s
    machine = (after.machine_busy - before.machine_busy) / hz
    wall = after.wall - before.wall
    return {
        "wall_s": round(wall, 1),
        "nodes_s": round(nodes_s, 1),
        "per_node_s": {str(i): round(v, 1) for i, v in nodes.items()},
        "node_util": round(nodes_s / wall, 3) if wall > 0 else None,
        "postgres_s": round(pg, 1),
        "broker_s": round(broker, 1),
        "harness_s": round(harness, 1),
        "machine_busy_s": round(machine, 1),
        "machine_util": round(machine / wall / (os.cpu_count() or 1), 3) if wall > 0 else None,
        "other_s": round(max(0.0, machine - nodes_s - pg - broker - harness), 1),
    }
