"""The thread-CPU probe counts the time of busy threads, of threads that ended within the window,
and of reaped children (loadtest.probes.thread_cpu)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from loadtest.probes.thread_cpu import sample


def _spin(cpu_seconds: float, clock: Callable[[], float]) -> None:
    """Burn ``cpu_seconds`` of CPU by ``clock`` (however long a loaded machine makes that)."""
    end = clock() + cpu_seconds
    while clock() < end:
        pass


def test_a_busy_thread_and_a_reaped_child_are_counted() -> None:
    def busy() -> None:
        _spin(0.2, time.thread_time)

    def child() -> None:
        pid = os.fork()
        if pid == 0:
            _spin(0.2, time.process_time)
            os._exit(0)
        os.waitpid(pid, 0)

    worker = threading.Thread(target=busy)
    forker = threading.Thread(target=child)
    worker.start()
    forker.start()
    used = sample([os.getpid()], 3.0)
    worker.join()
    forker.join()
    by_name = {u.name: u.seconds for u in used}
    assert by_name.get("threads that ended", 0.0) >= 0.15, used  # the busy thread ended in it
    assert by_name.get("reaped children", 0.0) >= 0.15, used
