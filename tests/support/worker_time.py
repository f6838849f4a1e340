"""The suite's time per worker and tier, printed at the end of a run: the fault scenarios share
one worker (``tests/conftest.py``), so that worker's total is the suite's floor, and an
``exclusive`` test costs its time on both. Without it a full run's only timing is the slowest
thirty tests, which cannot tell which worker bounds the wall clock."""

from __future__ import annotations

from collections import defaultdict
from typing import Any, cast

import pytest

from tests.support.machine import WAITED

LONG_WAIT_S, LONGEST_WAITS = 1.0, 10  # the waits listed: the ten longest of a second or more


class WorkerTime:
    def __init__(self) -> None:
        # worker -> tier -> seconds (setup + call + teardown)
        self.seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        # worker -> seconds its tests waited for the machine (the other worker's exclusive
        # tests, or the other worker's tests under way when its own was exclusive)
        self.waited: dict[str, float] = defaultdict(float)
        # (seconds, worker, test) of the longest waits, to say which tests cost them
        self.waits: list[tuple[float, str, str]] = []

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        node: Any = getattr(report, "node", None)  # the xdist worker that ran it, if any
        worker = str(getattr(getattr(node, "gateway", None), "id", "main"))
        tier = report.nodeid.split("/")[1] if report.nodeid.startswith("tests/") else "other"
        self.seconds[worker][tier] += report.duration
        if report.when == "setup":  # the same properties ride on all three reports
            waited = sum(cast(float, v) for k, v in report.user_properties if k == WAITED)
            self.waited[worker] += waited
            if waited >= LONG_WAIT_S:
                self.waits.append((waited, worker, report.nodeid))

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.seconds:
            return
        terminalreporter.section("time per worker")
        for worker, tiers in sorted(self.seconds.items()):
            parts = ", ".join(f"{t} {s:.0f} s" for t, s in sorted(tiers.items(), key=_slowest))
            waited = f", waited for the machine {self.waited[worker]:.0f} s"
            terminalreporter.write_line(f"{worker}: {sum(tiers.values()):.0f} s ({parts}){waited}")
        for seconds, worker, nodeid in sorted(self.waits, reverse=True)[:LONGEST_WAITS]:
            terminalreporter.write_line(f"  {worker} waited {seconds:.0f} s before {nodeid}")


def _slowest(item: tuple[str, float]) -> float:
    return -item[1]
