"""A process tree for the tests of the benchmark's process statistics."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil


@contextlib.contextmanager
def process_tree(script: str, children: int, timeout: float = 30.0) -> Iterator[int]:
    """The pid of a Python process running ``script``, once it has ``children`` children; it and
    its descendants are killed at the end."""
    root = subprocess.Popen([sys.executable, "-c", script])
    try:
        limit = time.monotonic() + timeout
        while len(psutil.Process(root.pid).children()) < children:
            assert time.monotonic() < limit, "the process tree did not start"
            time.sleep(0.05)
        yield root.pid
    finally:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(root.pid).children(recursive=True):
                child.kill()
        root.kill()
        root.wait()


# CPU figures read through /proc are the kernel's clock ticks (1/100 s each for user and system
# time, truncated), while a process's own clock (``time.process_time``) is exact: a figure read
# from /proc is compared with what the process reports of itself, within this tolerance, never
# with the amount it was told to burn (a process that burned 0.3 s can read 0.29 s in /proc).
CPU_TOLERANCE_S = 0.05
CPU_TOLERANCE_SHARE = 0.1


def burn_script(seconds: float = 0.3, report: str | None = None) -> str:
    """A Python script that burns ``seconds`` of its own CPU, then reports the CPU time it has
    used in all (its own clock: start-up included) on a line of its stdout, or into the file
    ``report``; then it sleeps."""
    tell = (
        "print(time.process_time(), flush=True)\n"
        if report is None
        else f"open({report!r}, 'w').write(str(time.process_time()))\n"
    )
    return (
        "import time\n"
        "t = time.process_time()\n"
        f"while time.process_time() - t < {seconds!r}: pass\n"
        f"{tell}"
        "time.sleep(60)\n"
    )


def reported_cpu(child: subprocess.Popen[str]) -> float:
    """The CPU time a ``burn_script`` child reports on its stdout once it has burned it: it comes
    when the work is done, however busy the machine (no deadline on a sampled figure)."""
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, f"the burning process exited ({child.wait()}) before reporting"
    return float(line)


def cpu_close(read: float, reported: float) -> bool:
    """``read`` (through /proc) is ``reported`` (the processes' own clocks), within the ticks'
    truncation and a margin."""
    return abs(read - reported) <= CPU_TOLERANCE_S + CPU_TOLERANCE_SHARE * reported


def start_burner(seconds: float = 0.3) -> subprocess.Popen[str]:
    """A child running ``burn_script``, reporting on its stdout (read it with
    ``reported_cpu``)."""
    return subprocess.Popen(
        [sys.executable, "-c", burn_script(seconds)], stdout=subprocess.PIPE, text=True
    )
