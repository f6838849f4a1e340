"""The machine shared by the suite's two workers: a test marked ``exclusive`` runs with it to
itself.

``make test`` runs two pytest-xdist workers on a two-core machine. The fault scenarios take turns
on one worker; the other tiers run beside them on the other, and some of those saturate the
machine for a minute (the benchmark's smoke run at 10,000 msg/s, the load-test analysis's Spark
job). A scenario whose bounds are timings of a cluster under a fault (scenario 21: a broker
killed, the lateness and copies that follow) measures that neighbour instead of Chronos when the
two meet: the brokers' heartbeats lapse, a surviving broker is fenced too, the consumer group's
sessions end (seen in CI: no heartbeat answered for 5.6 s before the kill). So every test holds
a shared lock on one file per run (named after the run's id) while it is set up, run and torn
down, and an ``exclusive`` test holds it alone: it waits for the other worker's test under way to
end, and that worker waits for it. Outside pytest-xdist nothing runs beside a test and nothing
is locked.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

EXCLUSIVE = "exclusive"
WAITED = "machine_wait_s"
"""The seconds ``item`` waited for the lock, in its reports' ``user_properties`` (the run's
summary adds them up per worker: ``tests/support/worker_time.py``)."""


@contextmanager
def machine_share(item: pytest.Item) -> Iterator[None]:
    """Hold the run's machine lock for ``item``: alone if it is marked ``exclusive``."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # the same in every worker of one run
    if run is None:
        yield
        return
    lock_path = Path(tempfile.gettempdir()) / f"chronos-tests-{run}.lock"
    alone = item.get_closest_marker(EXCLUSIVE) is not None
    with lock_path.open("a") as handle:
        asked = time.monotonic()
        fcntl.flock(handle, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        item.user_properties.append((WAITED, time.monotonic() - asked))
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
