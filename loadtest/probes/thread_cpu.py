"""Where a running node's CPU goes, thread by thread: run it beside a steady load.

    python -m loadtest.probes.thread_cpu PID [PID ...] [--seconds 30]

Reads every thread's user + system time from ``/proc/<pid>/task/<tid>/stat`` of each process
(a node: the ``chronos run`` process and its intake process, ``chronos.intake.child``) at the
start and the end of the window, and each process's reaped children's time (the header probe's
forked children with ``CHRONOS_HEADER_PROBE=process``). Prints CPU-seconds and the share of a
core per thread name (librdkafka names its threads ``rdk:*``; Python threads show as the
process's name), and the total in cores. Linux only.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PROCESS = "(the whole process)"  # the key of a process's own total in a snapshot


@dataclass(frozen=True)
class Usage:
    pid: int
    name: str  # a thread's name, or "reaped children"
    seconds: float


def _fields(stat: str) -> tuple[str, list[str]]:
    """The name and the fields after it of a ``stat`` line (the name may hold spaces)."""
    return stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()


def snapshot(pids: list[int]) -> dict[tuple[int, str], float]:
    """CPU-seconds so far per (pid, thread name), and per (pid, "reaped children")."""
    seen: dict[tuple[int, str], float] = {}
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    name, fields = _fields(f.read())
            except FileNotFoundError:  # the thread ended meanwhile
                continue
            used = (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime
            seen[(pid, name)] = seen.get((pid, name), 0.0) + used
        with open(f"/proc/{pid}/stat") as f:
            _, fields = _fields(f.read())
        seen[(pid, "reaped children")] = (int(fields[13]) + int(fields[14])) / _TICKS
        seen[(pid, _PROCESS)] = (int(fields[11]) + int(fields[12])) / _TICKS
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
