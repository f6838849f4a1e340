"""Test-only fault points: kill this process at a named step boundary.

``CHRONOS_FAULT_KILL_AT=<point>[:<n>]`` makes the n-th passage (default the first) through
``fault_point(<point>)`` send SIGKILL to this very process, so the fault suite can prove that a
crash between any two steps loses nothing. In the intake process the node process is killed
first: a fault point simulates the crash of the whole node. Unset (always, in production) a
fault point costs one attribute read. Points:

* ``after_claim``            firing: the claim transaction committed, nothing published yet
* ``after_produce``          dispatcher: records handed to the producer, no delivery report yet
* ``after_report``           firing: delivery reports received, rows not yet deleted
* ``after_enqueue``          intake: the batch is committed to Postgres, offsets not yet stored
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

POINTS = frozenset({"after_claim", "after_produce", "after_report", "after_enqueue"})
ENV = "CHRONOS_FAULT_KILL_AT"


def _parse(raw: str | None) -> tuple[str, int] | None:
    if not raw:
        return None
    name, _, count = raw.partition(":")
    if name not in POINTS:
        raise ValueError(f"{ENV}={raw!r}: unknown fault point (known: {', '.join(sorted(POINTS))})")
    return name, int(count or 1)


_armed = _parse(os.environ.get(ENV))
_hits = 0
_lock = threading.Lock()
_also: list[int] = []


def kill_also(pid: int) -> None:
    """Make a fault point kill process ``pid`` too (the intake process names its node)."""
    _also.append(pid)


def fault_point(name: str) -> None:
    global _hits
    if _armed is None or _armed[0] != name:
        return
    with _lock:
        _hits += 1
        if _hits >= _armed[1]:
            for pid in _also:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            os.kill(os.getpid(), signal.SIGKILL)
