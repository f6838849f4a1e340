"""The stall probe's hook (``loadtest/probes/stalls.py``): Python imports this module at start-up
when its folder is on ``PYTHONPATH``; with ``LOADTEST_STALL_PROBE=DIR`` set, a Chronos process
(``chronos run``, the intake child, ``chronos dev``'s nodes) starts a thread that sleeps 2 ms at a
time. When it wakes more than ``LOADTEST_STALL_PROBE_MS`` (default 10) later than it asked, the
process stalled: it writes the gap and where every other thread of the process stood at that
moment to ``DIR/stalls-<pid>.jsonl``. With ``LOADTEST_SWITCH_INTERVAL_MS`` it also sets the
interpreter's switch interval (how long a running thread keeps the lock from one that asks for
it; Python's default 5 ms), at start and again 3 s later (in case the process set its own at
start-up): to compare intervals without changing Chronos. Self-contained (the
standard library only): it runs before anything else of the process is imported."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback

TICK_S = 0.002
DEPTH = 10  # frames kept per thread, innermost last


def _stacks(me: int) -> dict[str, list[str]]:
    names = {t.ident: t.name for t in threading.enumerate()}
    stacks = {}
    for ident, frame in sys._current_frames().items():
        if ident != me:
            stacks[names.get(ident, str(ident))] = [
                f"{os.path.basename(f.filename)}:{f.lineno}:{f.name}"
                for f in traceback.extract_stack(frame)[-DEPTH:]
            ]
    return stacks


def _watch(path: str, threshold_s: float) -> None:
    me = threading.get_ident()
    with open(path, "a", buffering=1) as out:
        out.write(json.dumps({"pid": os.getpid(), "argv": sys.orig_argv, "tick_ms": 2}) + "\n")
        before = time.monotonic()
        while True:
            time.sleep(TICK_S)
            now = time.monotonic()
            gap = now - before - TICK_S
            if gap >= threshold_s:
                event = {"t": time.time(), "gap_ms": round(gap * 1000, 1), "stacks": _stacks(me)}
                out.write(json.dumps(event) + "\n")
                now = time.monotonic()  # the write is the probe's own time, not a stall
            before = now


def _start() -> None:
    if "chronos" not in " ".join(sys.orig_argv):
        return
    switch = os.environ.get("LOADTEST_SWITCH_INTERVAL_MS")
    if switch:  # now, and again once the process has set its own at start-up
        sys.setswitchinterval(float(switch) / 1000)
        timer = threading.Timer(3.0, sys.setswitchinterval, args=(float(switch) / 1000,))
        timer.daemon = True
        timer.start()
    directory = os.environ.get("LOADTEST_STALL_PROBE")
    if directory:
        threshold = float(os.environ.get("LOADTEST_STALL_PROBE_MS", "10")) / 1000
        path = os.path.join(directory, f"stalls-{os.getpid()}.jsonl")
        watch = threading.Thread(target=_watch, args=(path, threshold), name="stall-probe")
        watch.daemon = True
        watch.start()


_start()
