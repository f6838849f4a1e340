"""Where a running node's CPU goes, thread by thread: run it beside a steady load.

    python -m loadtest.probes.thread_cpu PID [PID ...] [--seconds 30]

Reads every thread's user + system time (psutil; the thread's name from ``/proc``) of each process
(a node: the ``chronos run`` process and its intake process, ``chronos.intake.child``) at the
start and the end of the window, and each process's reaped children's time (the header probe's
forked children with ``CHRONOS_HEADER_PROBE=process``). Prints CPU-seconds and the share of a
core per thread name (librdkafka names its threads ``rdk:*``; Python threads show as the
process's name), and the total in cores. Linux only.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import psutil

_PROCESS = "(the whole process)"  # the key of a process's own total in a snapshot


@dataclass(frozen=True)
class Usage:
    pid: int
    name: str  # a thread's name, or "reaped children"
    seconds: float


def _thread_name(pid: int, tid: int) -> str:
    """A thread's name (psutil gives its times, not its name); "" if it ended meanwhile."""
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def snapshot(pids: list[int]) -> dict[tuple[int, str], float]:
    """CPU-seconds so far per (pid, thread name), per (pid, "reaped children") and per
    (pid, the whole process)."""
    seen: dict[tuple[int, str], float] = {}
    for pid in pids:
        process = psutil.Process(pid)
        for thread in process.threads():
            name = _thread_name(pid, thread.id)
            if name:
                used = thread.user_time + thread.system_time
                seen[(pid, name)] = seen.get((pid, name), 0.0) + used
        times = process.cpu_times()
        seen[(pid, "reaped children")] = times.children_user + times.children_system
        seen[(pid, _PROCESS)] = times.user + times.system
    return seen


def sample(pids: list[int], seconds: float) -> list[Usage]:
    """CPU-seconds each thread name of ``pids`` used over the next ``seconds``, busiest first. A
    thread that ended within the window has no entry left: its time is the process's total less
    its live threads', reported as "threads that ended"."""
    before = snapshot(pids)
    time.sleep(seconds)
    after = snapshot(pids)
    used: list[Usage] = []
    for pid in pids:
        named = [
            Usage(pid, name, max(0.0, v - before.get((p, name), 0.0)))
            for (p, name), v in after.items()
            if p == pid and name != _PROCESS
        ]
        total = after[(pid, _PROCESS)] - before[(pid, _PROCESS)]
        threads = sum(u.seconds for u in named if u.name != "reaped children")
        used += [*named, Usage(pid, "threads that ended", max(0.0, round(total - threads, 2)))]
    return sorted((u for u in used if u.seconds > 0), key=lambda u: -u.seconds)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes.thread_cpu", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("pids", type=int, nargs="+", help="processes to watch")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the window")
    args = parser.parse_args()
    usages = sample(args.pids, args.seconds)
    for u in usages:
        share = 100 * u.seconds / args.seconds
        print(f"{u.pid:>8}  {u.name:<24} {u.seconds:7.2f} s  {share:5.1f} % of a core")
    total = sum(u.seconds for u in usages)
    print(
        f"total {total:.2f} CPU-seconds in {args.seconds:.0f} s = {total / args.seconds:.3f} cores"
    )


if __name__ == "__main__":
    main()
