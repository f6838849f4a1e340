"""How ``make test`` shares the suite between its two workers (pytest-xdist, ``--dist
loadgroup``): every test on its own, as the load scheduler does, but for two groups, each kept on
one worker:

* the fault scenarios, one after another: each stops, freezes or kills what its worker shares
  (its Postgres, its broker), and their bounds were set for one scenario at a time;
* the load-test modules that run Spark: one Spark session (a JVM, ~20 s to start on this
  machine) and one computation of each module's analysis fixture, instead of one per worker.

The order is the longest first, from both ends of one queue: the fault scenarios (~25 minutes,
the suite's floor) go to one worker, which takes nothing else until its last scenarios; the other
worker takes the rest from the slow end (the Spark group, the load tests, the deployment,
end-to-end and integration tests, then migrations and units), and the fault worker, once its
scenarios are nearly done, takes from the fast end (units first) until the two meet. The two
workers then end within a few short tests of each other. xdist's own order (the scopes with the
most tests first) once gave the fault worker the Spark group as well (3.7 minutes): it ran 2.6
minutes longer than the other, and the suite's wall clock with it.

An ``exclusive`` test (``tests/support/machine.py``) waits for the other worker's test under
way, then idles that worker while it runs. Every module that marks one (but the Spark group's,
which shares its session there) joins the fault group, and the fault group runs them last: by
then the other worker is down to the fast end of the queue, so an exclusive test waits seconds
for a unit or integration test, not up to two minutes for a fault scenario or the soak's smoke run
(the waits per worker of a full run: 104 and 151 s before, in the run's summary with the ten
longest).

The grouping is this scheduler's own rule, not the ``xdist_group`` mark: pytest-xdist 3.8 marks a
group by renaming the test's node id, which pytest 9 no longer lets it do, so the mark groups
nothing (two fault scenarios ran at once, one per worker)."""

from __future__ import annotations

from collections import OrderedDict
from functools import cache
from pathlib import Path
from typing import Any

from xdist.scheduler.loadgroup import LoadGroupScheduling

from tests.support.machine import EXCLUSIVE

FAULT_GROUP, SPARK_GROUP = "fault", "spark"
FAULT_TIER, LOADTEST_TIER = "tests/fault/", "tests/loadtest/"
# The slow end of the queue first: a tier's tests take seconds to minutes each in this order.
SLOW_TO_FAST = ("loadtest", "deploy", "e2e", "integration", "migration", "unit")


class SuiteScheduling(LoadGroupScheduling):  # type: ignore[misc]  # xdist: untyped
    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self.root = Path(config.rootpath)
        self.ordered = False
        self.fault_worker: Any = None

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        if module.startswith(LOADTEST_TIER) and runs_spark(self.root / module):
            return SPARK_GROUP
        if module.startswith(FAULT_TIER) or runs_alone(self.root / module):
            return FAULT_GROUP
        return str(super()._split_scope(nodeid))

    def _assign_work_unit(self, node: Any) -> None:
        """Give ``node`` the next scope: the fault group to the first worker that asks, the slow
        end of the queue to the other, the fast end to the fault worker."""
        if not self.ordered:
            ordered = sorted(self.workqueue.items(), key=lambda item: queue_rank(item[0]))
            self.workqueue.clear()
            self.workqueue.update(ordered)
            if FAULT_GROUP in self.workqueue:
                self.workqueue[FAULT_GROUP] = self.alone_last(self.workqueue[FAULT_GROUP])
            self.ordered = True
        if node is self.fault_worker:
            self.workqueue.move_to_end(next(reversed(self.workqueue)), last=False)
        elif self.fault_worker is None and next(iter(self.workqueue)) == FAULT_GROUP:
            self.fault_worker = node
        super()._assign_work_unit(node)

    def alone_last(self, unit: dict[str, bool]) -> dict[str, bool]:
        """The fault group's tests in collection order, the modules with exclusive tests last
        (module by module: a module's fixtures are set up once)."""
        order = sorted(unit, key=lambda nodeid: runs_alone(self.root / nodeid.split("::", 1)[0]))
        return OrderedDict((nodeid, unit[nodeid]) for nodeid in order)


def queue_rank(scope: str) -> int:
    """A scope's place in the queue: the fault group, the Spark group, then tier by tier from the
    slowest (``SLOW_TO_FAST``); the sort is stable, so a tier keeps its collection order."""
    if scope == FAULT_GROUP:
        return 0
    if scope == SPARK_GROUP:
        return 1
    tier = scope.split("/")[1] if scope.startswith("tests/") else ""
    return 2 + (SLOW_TO_FAST.index(tier) if tier in SLOW_TO_FAST else len(SLOW_TO_FAST))


@cache
def runs_spark(module: Path) -> bool:
    """Whether a test module uses the ``spark`` fixture (tests/loadtest/conftest.py)."""
    return "spark" in _text(module)


@cache
def runs_alone(module: Path) -> bool:
    """Whether a test module marks a test ``exclusive`` (``tests/support/machine.py``)."""
    return f"mark.{EXCLUSIVE}" in _text(module)


def _text(module: Path) -> str:
    try:
        return module.read_text()
    except OSError:
        return ""


def make_scheduler(config: Any, log: Any) -> SuiteScheduling | None:
    """The scheduler for ``--dist loadgroup`` (None: xdist's own for any other mode)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return SuiteScheduling(config, log)
