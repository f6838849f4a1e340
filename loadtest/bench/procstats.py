"""Process and machine statistics, read with psutil: a process's RSS, peak RSS and CPU time, a
process tree's CPU time (Postgres and its backends), the machine's busy CPU time, and the CPU each
component used during a load."""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from loadtest.bench.results.cpu import CpuPerMessage, CpuUsage

KB = 1024


def parse_status_kb(status_text: str, field_name: str = "VmRSS") -> int | None:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``)."""
    for line in status_text.splitlines():
        if line.startswith(field_name + ":"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1])
    return None


def read_proc(path: str) -> str | None:
    """A ``/proc`` file, for the two facts psutil does not give: a process's peak RSS
    (``VmHWM``) and the CPU model (``/proc/cpuinfo``)."""
    try:
        return Path(path).read_text()
    except OSError:
        return None


def cpu_model() -> str | None:
    for line in (read_proc("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


@dataclass(frozen=True)
class ProcStat:
    ppid: int
    cpu_s: float  # user + system
    children_cpu_s: float  # reaped children: user + system


def proc_stat(pid: int) -> ProcStat | None:
    """Parent and CPU seconds of a process (None once it is gone)."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            times = process.cpu_times()
            return ProcStat(
                ppid=process.ppid(),
                cpu_s=times.user + times.system,
                children_cpu_s=times.children_user + times.children_system,
            )
    except psutil.Error:
        return None


def rss_kb(pid: int) -> int | None:
    try:
        return int(psutil.Process(pid).memory_info().rss) // KB
    except psutil.Error:
        return None


def hwm_kb(pid: int) -> int | None:
    """Peak RSS (``VmHWM``): psutil has no field for it."""
    text = read_proc(f"/proc/{pid}/status")
    return None if text is None else parse_status_kb(text, "VmHWM")


def _tree(root: int) -> list[int]:
    """``root`` and its descendants (a node's intake process and its probes; Postgres's
    backends), or ``[root]`` alone once it is gone."""
    try:
        return [root, *(p.pid for p in psutil.Process(root).children(recursive=True))]
    except psutil.Error:
        return [root]


def tree_cpu_s(root: int | None) -> float:
    """CPU seconds of ``root`` and of every live descendant, each with its reaped children."""
    if root is None:
        return 0.0
    return sum(
        st.cpu_s + st.children_cpu_s for pid in _tree(root) if (st := proc_stat(pid)) is not None
    )


def tree_rss_kb(root: int) -> int | None:
    """RSS of ``root`` and its live descendants (None once ``root`` is gone). Pages a forked
    child shares with its parent count in both: see ``tree_pss_kb``."""
    if rss_kb(root) is None:
        return None
    return sum(rss for pid in _tree(root) if (rss := rss_kb(pid)) is not None)


def pss_kb(pid: int) -> int | None:
    """Proportional set size: the process's own pages plus its share of the pages it shares
    (RSS where the kernel gives no PSS)."""
    try:
        info = psutil.Process(pid).memory_full_info()
    except psutil.Error:
        return None
    return int(getattr(info, "pss", info.rss)) // KB


def tree_pss_kb(root: int) -> int | None:
    """The memory of ``root`` and its live descendants, each page counted once (the sum of
    their PSS; None once ``root`` is gone). A node's intake process forks a probe for every
    batch, and the probe shares the intake's pages copy-on-write: summing their RSS counts
    those pages twice, a container's memory (and this) once."""
    if pss_kb(root) is None:
        return None
    return sum(pss for pid in _tree(root) if (pss := pss_kb(pid)) is not None)


def tree_hwm_kb(root: int) -> int | None:
    """Sum of the peak RSS of ``root`` and its live descendants: an upper bound of the tree's
    peak (each process may peak at another moment)."""
    if hwm_kb(root) is None:
        return None
    return sum(hwm for pid in _tree(root) if (hwm := hwm_kb(pid)) is not None)


class TreeCpu:
    """CPU seconds of a process and all its descendants since this object was made, children
    that exited included.

    A node may run part of its work in child processes (an intake child, short-lived helpers
    it forks and waits for). At every ``sample()``: each live process of the tree (the root and
    ``children(recursive=True)``, plus every process seen before that is still alive, even if
    re-parented) counts its own CPU and that of the children it waited for
    (``children_user``/``children_system``), so a reaped child's time moves to its parent's
    figure without being lost or counted twice. A process that disappears between two samples
    without its (tracked, still alive) parent's waited-for time growing by as much was not
    reaped inside the tree: its last-seen CPU is kept. What such a process used after the last
    sample is lost, hence the sampler calls ``sample()`` every second.
    """

    def __init__(self, root: int) -> None:
        self.root = root
        self._lock = threading.Lock()
        # pid -> (create_time, ppid, own CPU + waited-for children's CPU, waited-for part)
        self._seen: dict[int, tuple[float, int, float, float]] = {}
        self._kept = 0.0  # CPU of tree processes gone unreaped
        self._start: float | None = None
        self._last = 0.0
        self.sample()
        self._start = self._last

    def _read(self, process: psutil.Process) -> tuple[float, int, float, float] | None:
        try:
            with process.oneshot():
                t = process.cpu_times()
                reaped = t.children_user + t.children_system
                return process.create_time(), process.ppid(), t.user + t.system + reaped, reaped
        except psutil.Error:
            return None

    def _processes(self) -> dict[int, psutil.Process]:
        found: dict[int, psutil.Process] = {}
        try:
            root = psutil.Process(self.root)
            found[root.pid] = root
            found.update({c.pid: c for c in root.children(recursive=True)})
        except psutil.Error:
            pass
        for pid in self._seen:
            if pid not in found:
                with contextlib.suppress(psutil.Error):
                    found[pid] = psutil.Process(pid)
        return found

    def sample(self) -> float:
        """The tree's CPU seconds now (since the object was made, once it exists)."""
        with self._lock:
            now: dict[int, tuple[float, int, float, float]] = {}
            for pid, process in self._processes().items():
                info = self._read(process)
                before = self._seen.get(pid)
                if info is not None and (before is None or info[0] == before[0]):
                    now[pid] = info
            gone = {pid: v for pid, v in self._seen.items() if pid not in now}
            by_parent: dict[int, float] = {}
            for _, ppid, total, _ in gone.values():
                by_parent[ppid] = by_parent.get(ppid, 0.0) + total
            for ppid, lost in by_parent.items():
                parent_then, parent_now = self._seen.get(ppid), now.get(ppid)
                reaped = 0.0
                if parent_then is not None and parent_now is not None:
                    reaped = parent_now[3] - parent_then[3]
                self._kept += max(0.0, lost - reaped)
            self._seen = now
            self._last = self._kept + sum(v[2] for v in now.values())
            return self._last - (self._start or 0.0)

    @property
    def processes(self) -> int:
        """How many processes the tree had at the last sample."""
        return len(self._seen)


def machine_busy_s() -> float:
    """CPU seconds all CPUs spent busy (neither idle nor waiting for I/O) since boot."""
    t = psutil.cpu_times()
    # guest time is already counted in user
    return float(t.user + t.nice + t.system + t.irq + t.softirq + t.steal)


def memory_total_kb() -> int:
    return int(psutil.virtual_memory().total) // KB


@dataclass
class CpuSnapshot:
    wall: float
    nodes: dict[int, float]
    postgres: float
    broker: float
    machine_busy: float
    children_s: float  # reaped children of this process (the load generator)


def cpu_snapshot(
    nodes: Mapping[int, TreeCpu], postgres_pids: Sequence[int | None], broker_pid: int | None
) -> CpuSnapshot:
    """CPU seconds so far of the nodes (index -> the node's process tree), Postgres (every
    shard's server), the broker, this process's reaped children and the machine."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return CpuSnapshot(
        wall=time.monotonic(),
        nodes={i: tree.sample() for i, tree in nodes.items()},
        postgres=sum(tree_cpu_s(pid) for pid in postgres_pids),
        broker=tree_cpu_s(broker_pid),
        machine_busy=machine_busy_s(),
        children_s=usage.ru_utime + usage.ru_stime,
    )


def idle_cores(pids: Sequence[int | None], seconds: float) -> float | None:
    """CPU seconds per wall second of the process trees ``pids`` over the next ``seconds``
    (None without a process to measure)."""
    if not any(pid is not None for pid in pids):
        return None
    started, before = time.monotonic(), sum(tree_cpu_s(pid) for pid in pids)
    time.sleep(seconds)
    used = sum(tree_cpu_s(pid) for pid in pids) - before
    return round(max(0.0, used) / (time.monotonic() - started), 4)


def cpu_delta(
    before: CpuSnapshot,
    after: CpuSnapshot,
    sampler_postgres_s: float | None = None,
    postgres_idle_cores: float | None = None,
) -> CpuUsage:
    """The CPU each component used between two snapshots; ``sampler_postgres_s``: the part of
    Postgres's that answered the benchmark's sampler (``Sampler.postgres_cpu_s``);
    ``postgres_idle_cores``: its rate with no load (``idle_cores``), kept beside them."""
    nodes = {i: after.nodes.get(i, 0.0) - before.nodes.get(i, 0.0) for i in after.nodes}
    nodes_s = sum(nodes.values())
    pg = after.postgres - before.postgres
    broker = after.broker - before.broker
    harness = after.children_s - before.children_s
    machine = after.machine_busy - before.machine_busy
    wall = after.wall - before.wall
    return CpuUsage(
        wall_s=round(wall, 1),
        nodes_s=round(nodes_s, 1),
        per_node_s={str(i): round(v, 1) for i, v in nodes.items()},
        node_util=round(nodes_s / wall, 3) if wall > 0 else None,
        postgres_s=round(pg, 1),
        sampler_postgres_s=None if sampler_postgres_s is None else round(sampler_postgres_s, 1),
        broker_s=round(broker, 1),
        harness_s=round(harness, 1),
        machine_busy_s=round(machine, 1),
        machine_util=round(machine / wall / (os.cpu_count() or 1), 3) if wall > 0 else None,
        other_s=round(max(0.0, machine - nodes_s - pg - broker - harness), 1),
        postgres_idle_cores=postgres_idle_cores,
    )


def cpu_per_message(cpu: CpuUsage, messages: int) -> CpuPerMessage:
    """Each component's CPU microseconds per message handled (sent to Chronos); Postgres's
    without what the benchmark's sampler cost it."""

    def us(seconds: float | None) -> float | None:
        return None if seconds is None or messages <= 0 else round(seconds * 1e6 / messages, 1)

    return CpuPerMessage(
        messages=messages,
        node_us=us(cpu.nodes_s),
        broker_us=us(cpu.broker_s),
        postgres_us=us(cpu.chronos_postgres_s),
        harness_us=us(cpu.harness_s),
        postgres_beyond_idle_us=us(cpu.postgres_beyond_idle_s),
    )
