"""Where a node's processes stall: when no thread of the firing process runs for tens of
milliseconds, the timers due meanwhile fire that late. Was another thread of the process holding
the interpreter lock (and where), or did the process get no CPU at all (every thread waiting: the
machine's other processes had the cores)?

Not a probe of its own but a hook any command that starts Chronos processes can carry
(``loadtest/probes/stall_site/sitecustomize.py``): run the benchmark, the soak or ``chronos dev``
with

    PYTHONPATH=loadtest/probes/stall_site LOADTEST_STALL_PROBE=DIR [LOADTEST_STALL_PROBE_MS=10]

and every Chronos process writes ``DIR/stalls-<pid>.jsonl``: each time a thread that sleeps 2 ms
at a time woke at least the threshold late, the gap and every other thread's stack. Then

    python -m loadtest.probes.stalls DIR

says, per process (the node's firing process and its intake process), how many stalls, how long
in all, which of them found every thread waiting (the process was not scheduled) and, for the
others, the frames of the threads that were running (the lock's likely holders), heaviest first.

The probe costs its process a wake-up every 2 ms. How to read the frames: the probe runs again
when the thread that held the lock lets go of it, either because the interpreter made it (every
switch interval, 5 ms by default) or because it entered a C call that releases the lock (a
statement sent to Postgres, a consumer's ``consume``). So a frame that shows up often is where a
thread lets go, and what held the lock is the Python that thread ran just before it: a firing
loop seen at psycopg's ``_send_query_prepared`` had been adapting the statement's parameters.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Innermost frames of a thread that waits with the interpreter lock released.
WAITING = frozenset(
    {
        "wait", "get", "select", "poll", "sleep", "_listen", "accept", "recv", "recv_into",
        "_worker", "serve_forever", "readline", "join", "_wait_for_tstate_lock", "relay",
        "_run_loop", "_follow", "result",
    }
)  # fmt: skip
PROBE_THREAD = "stall-probe"


@dataclass
class ProcessStalls:
    role: str
    pid: int
    gaps_ms: list[float] = field(default_factory=list)
    unscheduled_ms: float = 0.0  # stalls in which every thread waited
    running: dict[str, float] = field(default_factory=dict)  # "thread @ frame" -> ms

    @property
    def total_ms(self) -> float:
        return sum(self.gaps_ms)


def role_of(argv: list[str]) -> str:
    text = " ".join(argv)
    if "chronos.intake.child" in text:
        return "intake"
    return "node" if "chronos" in text else "other"


def running_threads(stacks: dict[str, list[str]]) -> list[str]:
    """``thread @ frame`` for each thread whose innermost frame is not a wait."""
    found = []
    for thread, frames in stacks.items():
        if thread == PROBE_THREAD or not frames:
            continue
        if frames[-1].rsplit(":", 1)[-1] not in WAITING:
            found.append(f"{thread} @ {frames[-1]}")
    return found


def read(path: Path) -> ProcessStalls | None:
    lines = path.read_text().splitlines()
    if not lines:
        return None
    head: dict[str, Any] = json.loads(lines[0])
    stalls = ProcessStalls(role_of(head.get("argv", [])), int(head.get("pid", 0)))
    for line in lines[1:]:
        event = json.loads(line)
        if "gap_ms" not in event:  # a second header: the file of a reused pid
            continue
        gap = float(event["gap_ms"])
        stalls.gaps_ms.append(gap)
        running = running_threads(event["stacks"])
        if not running:
            stalls.unscheduled_ms += gap
        for name in running:
            stalls.running[name] = stalls.running.get(name, 0.0) + gap / len(running)
    return stalls


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def report(directory: Path, top: int = 12) -> str:
    out = []
    for path in sorted(directory.glob("stalls-*.jsonl")):
        stalls = read(path)
        if stalls is None:
            continue
        gaps = stalls.gaps_ms
        out.append(
            f"{stalls.role} (pid {stalls.pid}): {len(gaps)} stalls, {stalls.total_ms:.0f} ms in "
            f"all, p50 {percentile(gaps, 0.5):.0f} ms, max {max(gaps, default=0):.0f} ms; "
            f"every thread waiting (not scheduled) in {stalls.unscheduled_ms:.0f} ms of them"
        )
        for name, ms in sorted(stalls.running.items(), key=lambda item: -item[1])[:top]:
            out.append(f"    {ms:7.0f} ms  {name}")
    return "\n".join(out) if out else f"no stall files in {directory}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", type=Path, help="where LOADTEST_STALL_PROBE pointed")
    parser.add_argument("--top", type=int, default=12, help="frames shown per process")
    args = parser.parse_args(argv)
    print(report(args.directory, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
