"""The benchmark's process statistics: /proc figures, a node's whole process tree (children it
waited for, children that left the tree and grandchildren included), the machine's busy time, and
the CPU per message handled."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from loadtest.bench import procstats
from loadtest.bench.results.cpu import CpuUsage
from tests.loadtest.processes import (
    CPU_TOLERANCE_S,
    burn_script,
    cpu_close,
    process_tree,
    reported_cpu,
    start_burner,
)


def _wait_for(path: Path, what: str) -> str:
    limit = time.monotonic() + 60
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < limit, f"timed out waiting for {what}"
        time.sleep(0.05)
    return path.read_text().strip()


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


STATUS = """Name:\tpython
State:\tS (sleeping)
VmPeak:\t  912344 kB
VmHWM:\t  190312 kB
VmRSS:\t  181234 kB
Threads:\t12
"""


def test_parse_rss() -> None:
    assert procstats.parse_status_kb(STATUS) == 181234
    assert procstats.parse_status_kb(STATUS, "VmHWM") == 190312
    assert procstats.parse_status_kb("Name:\tkthreadd\n") is None


def test_tree_cpu_counts_live_children() -> None:
    """A process tree's CPU time includes its live children (Postgres's backends)."""
    child = start_burner()
    try:
        burned = reported_cpu(child)
        st = procstats.proc_stat(child.pid)
        assert st is not None and st.ppid == os.getpid()
        assert cpu_close(st.cpu_s, burned), (st.cpu_s, burned)
        own = procstats.proc_stat(os.getpid())
        assert own is not None
        # The child's figure, read again inside the tree, only grew.
        assert procstats.tree_cpu_s(os.getpid()) >= own.cpu_s + own.children_cpu_s + st.cpu_s
    finally:
        child.kill()
        child.wait()
    assert procstats.proc_stat(child.pid) is None
    assert procstats.tree_cpu_s(None) == 0.0 and procstats.rss_kb(child.pid) is None


def test_tree_figures_count_grandchildren(tmp_path: Path) -> None:
    """A node is a process tree (its intake process, that one's probes): CPU time and memory of
    a node count every generation."""
    report = tmp_path / "burned"
    spawn = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {burn_script(report=str(report))!r}])\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", spawn])
    grandchildren: list[psutil.Process] = []
    try:
        burned = float(_wait_for(report, "the grandchild's work"))
        grandchildren = psutil.Process(child.pid).children()
        assert len(grandchildren) == 1
        st = procstats.proc_stat(grandchildren[0].pid)
        assert st is not None and cpu_close(st.cpu_s, burned), (st, burned)
        me = procstats.proc_stat(os.getpid())
        assert me is not None  # the grandchild's CPU counts in this process's tree
        assert procstats.tree_cpu_s(os.getpid()) >= me.cpu_s + me.children_cpu_s + st.cpu_s
        # ... and in its parent's, which itself burned next to nothing.
        parent = procstats.proc_stat(child.pid)
        assert parent is not None and parent.cpu_s < burned
        assert procstats.tree_cpu_s(child.pid) >= parent.cpu_s + st.cpu_s
        own, theirs = procstats.rss_kb(child.pid), procstats.rss_kb(grandchildren[0].pid)
        assert own is not None and theirs is not None
        assert (procstats.tree_rss_kb(child.pid) or 0) > own + theirs // 2
        peaks = [procstats.hwm_kb(p) or 0 for p in (child.pid, grandchildren[0].pid)]
        assert (procstats.tree_hwm_kb(child.pid) or 0) >= sum(peaks)  # peaks only grow
    finally:
        for process in grandchildren or psutil.Process(child.pid).children():
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        child.kill()
        child.wait()
    assert procstats.tree_rss_kb(child.pid) is None and procstats.tree_hwm_kb(child.pid) is None


def test_machine_busy_and_memory() -> None:
    first = procstats.machine_busy_s()
    assert 0 < first <= procstats.machine_busy_s()
    assert procstats.memory_total_kb() > 100_000


def test_own_process_is_readable() -> None:
    assert (procstats.rss_kb(os.getpid()) or 0) > 1000
    st = procstats.proc_stat(os.getpid())
    assert st is not None and st.ppid == os.getppid()


def test_tree_cpu_keeps_children_the_root_waited_for(tmp_path: Path) -> None:
    """The root runs two short-lived children one after the other and waits for each (like an
    intake forking a probe per batch): their CPU counts although neither is alive at the end."""
    done = tmp_path / "done"
    burn = burn_script().replace("time.sleep(60)\n", "")
    script = (
        "import subprocess, sys, time\n"
        "burned = sum(\n"
        f"    float(subprocess.run([sys.executable, '-c', {burn!r}], check=True,\n"
        "                         capture_output=True, text=True).stdout)\n"
        "    for _ in range(2)\n"
        ")\n"
        # What the tree used in all: the children's CPU and the root's own so far.
        f"open({str(done)!r}, 'w').write(str(burned + time.process_time()))\n"
        "time.sleep(60)\n"
    )
    root = subprocess.Popen([sys.executable, "-c", script])
    try:
        tree = procstats.TreeCpu(root.pid)
        used = float(_wait_for(done, "the children"))
        assert used > 0.6
        seen = tree.sample()
        assert cpu_close(seen, used), (seen, used)
        assert tree.processes == 1  # only the root is left
    finally:
        root.kill()
        root.wait()


def test_tree_cpu_keeps_a_descendant_that_left_the_tree(tmp_path: Path) -> None:
    """A grandchild whose parent exits is re-parented outside the tree and never reaped by a
    tree member: the CPU it had when last sampled is kept."""
    pid_file, ready = tmp_path / "grandchild", tmp_path / "ready"
    grandchild = burn_script(report=str(ready))
    middle = (
        "import subprocess, sys\n"
        f"g = subprocess.Popen([sys.executable, '-c', {grandchild!r}])\n"
        f"open({str(pid_file)!r}, 'w').write(str(g.pid))\n"
        "sys.stdin.read()\n"  # exits, without waiting for g, once stdin closes
    )
    root_script = (
        "import subprocess, sys, time\n"
        f"m = subprocess.Popen([sys.executable, '-c', {middle!r}], stdin=subprocess.PIPE)\n"
        "sys.stdin.read()\n"
        "m.stdin.close(); m.wait()\n"
        "time.sleep(60)\n"
    )
    # The tree's root runs under a subreaper outside the tree, which reaps the orphan: once
    # killed, the grandchild is really gone, not a zombie.
    root_pid_file = tmp_path / "root"
    reaper = (
        "import ctypes, os, subprocess, sys\n"
        "ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)\n"  # PR_SET_CHILD_SUBREAPER
        f"r = subprocess.Popen([sys.executable, '-c', {root_script!r}])\n"
        f"open({str(root_pid_file)!r}, 'w').write(str(r.pid))\n"
        "while True:\n"
        "    try: os.waitpid(-1, 0)\n"
        "    except ChildProcessError: break\n"
    )
    root = subprocess.Popen([sys.executable, "-c", reaper], stdin=subprocess.PIPE)
    g_pid = 0
    try:
        tree = procstats.TreeCpu(int(_wait_for(root_pid_file, "the root")))
        g_pid = int(_wait_for(pid_file, "the grandchild's pid"))
        burned = float(_wait_for(ready, "the grandchild's work"))
        seen = tree.sample()
        assert seen >= burned - CPU_TOLERANCE_S and tree.processes == 3
        assert root.stdin is not None
        root.stdin.close()  # the middle process exits; the grandchild is orphaned
        limit = time.monotonic() + 30
        while tree.processes != 2:  # the root and the re-parented grandchild
            tree.sample()
            assert time.monotonic() < limit
            time.sleep(0.05)
        assert psutil.Process(g_pid).ppid() == root.pid  # the subreaper, outside the tree
        psutil.Process(g_pid).kill()
        limit = time.monotonic() + 30
        while psutil.pid_exists(g_pid):
            assert time.monotonic() < limit
            time.sleep(0.05)
        g_pid = 0
        assert tree.sample() >= seen
    finally:
        if g_pid and _alive(g_pid):
            psutil.Process(g_pid).kill()
        for child in psutil.Process(root.pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):  # one may exit as another dies
                child.kill()
        root.wait()


def test_cpu_per_message() -> None:
    cpu = CpuUsage(nodes_s=15.0, broker_s=6.0, postgres_s=9.0, harness_s=3.0)
    per = procstats.cpu_per_message(cpu, 100_000)
    assert (per.node_us, per.broker_us, per.postgres_us, per.harness_us) == (
        150.0,
        60.0,
        90.0,
        30.0,
    )
    assert per.messages == 100_000
    assert procstats.cpu_per_message(cpu, 0).node_us is None
    assert procstats.cpu_per_message(CpuUsage(), 10).broker_us is None


@pytest.mark.parametrize("messages", [1, 1_000_000])
def test_cpu_per_message_round_trips(messages: int) -> None:
    from loadtest.bench.results.cpu import CpuPerMessage

    per = procstats.cpu_per_message(CpuUsage(nodes_s=1.0, broker_s=0.5), messages)
    assert CpuPerMessage.from_dict(per.as_dict()) == per


def test_report_separates_the_brokers_cost_from_the_control() -> None:
    from loadtest.bench.records import BenchRecord
    from loadtest.bench.report import render_markdown

    def rec(name: str, kind: str, wall: float, broker: float, messages: int) -> dict[str, object]:
        cpu = CpuUsage(wall_s=wall, nodes_s=1.0, broker_s=broker, postgres_s=0.5, harness_s=0.2)
        return {
            "name": name,
            "kind": kind,
            "status": "ok",
            "cpu": cpu.as_dict(),
            "cpu_per_message": procstats.cpu_per_message(cpu, messages).as_dict(),
        }

    bench = BenchRecord.from_dict(
        {
            "scenarios": [
                rec("relay", "relay", 20.0, 5.0, 10_000),  # 0.25 core without Chronos
                rec("sustained", "sustained", 30.0, 9.0, 100_000),
            ]
        }
    )
    text = render_markdown(bench)
    # 9 s - 0.25 x 30 s = 1.5 s beyond the control over 100,000 messages: 15 µs/msg.
    assert "| sustained | 100,000 | 10.0 | 90.0 | 0.30 | 15.0 | 5.0 | n/a | n/a | 2.0 |" in text
    assert "| relay | 10,000 | 100.0 | 500.0 | 0.25 | n/a | 50.0 | n/a | n/a | 20.0 |" in text


def test_postgres_beyond_idle_takes_the_idle_rate_over_the_run_away() -> None:
    """Postgres's idle rate (every node polls every shard) over the run's wall time is not
    a message's cost: 12 s in 40 s with 0.1 core idle leaves 8 s for 100,000 messages."""
    from loadtest.bench.records import BenchRecord
    from loadtest.bench.report import render_markdown

    cpu = CpuUsage(wall_s=40.0, postgres_s=13.0, sampler_postgres_s=1.0, postgres_idle_cores=0.1)
    assert cpu.postgres_beyond_idle_s == 8.0
    per = procstats.cpu_per_message(cpu, 100_000)
    assert (per.postgres_us, per.postgres_beyond_idle_us) == (120.0, 80.0)
    assert CpuUsage.from_dict(cpu.as_dict()) == cpu
    assert procstats.cpu_per_message(CpuUsage(postgres_s=1.0), 10).postgres_beyond_idle_us is None
    record = {"name": "burst", "kind": "burst", "status": "ok", "cpu": cpu.as_dict()}
    record["cpu_per_message"] = per.as_dict()
    text = render_markdown(BenchRecord.from_dict({"scenarios": [record]}))
    assert "| 120.0 | 0.100 | 80.0 |" in text


def test_idle_cores_measures_a_process_tree_at_rest_and_at_work() -> None:
    """The idle window's rate: a sleeping process costs about nothing, a spinning one up to a
    core (less on a busy machine)."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        rest = procstats.idle_cores([sleeper.pid, None], 1.0)
        work = procstats.idle_cores([burner.pid], 1.0)
    finally:
        for proc in (sleeper, burner):
            proc.kill()
            proc.wait()
    assert rest is not None and rest < 0.05
    assert work is not None and work > 0.2
    assert procstats.idle_cores([None], 0.01) is None


def test_tree_memory_counts_the_pages_a_fork_shares_once() -> None:
    """A process that forks a child sharing its 200 MB (as intake's header probe does): the
    sum of their RSS counts the 200 MB twice, the tree's memory once."""
    script = (
        "import os, time\n"
        "block = bytearray(200 * 1024 * 1024)\n"
        "for i in range(0, len(block), 4096): block[i] = 1\n"
        "os.fork()\n"
        "time.sleep(60)\n"
    )
    with process_tree(script, children=1) as parent:
        rss_sum = procstats.tree_rss_kb(parent) or 0
        memory = procstats.tree_pss_kb(parent) or 0
        own = procstats.rss_kb(parent) or 0
        assert rss_sum > 400 * 1024  # both count the block
        assert 200 * 1024 < memory < own + 50 * 1024  # once, plus the child's own few pages
    assert procstats.tree_pss_kb(parent) is None
