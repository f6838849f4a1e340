"""How ``make test`` shares the suite between its two workers (pytest-xdist, ``--dist
loadgroup``): every test on its own, as the load scheduler does, but for two groups, each kept on
one worker:

* the fault scenarios, one after another: each stops, freezes or kills what its worker shares
  (its Postgres, its broker), and their bounds were set for one scenario at a time;
* the load-test modules that run Spark: one Spark session (a JVM, ~20 s to start on this
  machine) and one computation of each module's analysis fixture, instead of one per worker.

The grouping is this scheduler's own rule, not the ``xdist_group`` mark: pytest-xdist 3.8 marks a
group by renaming the test's node id, which pytest 9 no longer lets it do, so the mark groups
nothing (two fault scenarios ran at once, one per worker)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from xdist.scheduler.loadgroup import LoadGroupScheduling

FAULT_GROUP, SPARK_GROUP = "fault", "spark"
FAULT_TIER, LOADTEST_TIER = "tests/fault/", "tests/loadtest/"


class SuiteScheduling(LoadGroupScheduling):  # type: ignore[misc]  # xdist: untyped
    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self.root = Path(config.rootpath)

    def _split_scope(self, nodeid: str) -> str:
        if nodeid.startswith(FAULT_TIER):
            return FAULT_GROUP
        module = nodeid.split("::", 1)[0]
        if module.startswith(LOADTEST_TIER) and runs_spark(self.root / module):
            return SPARK_GROUP
        return str(super()._split_scope(nodeid))


@cache
def runs_spark(module: Path) -> bool:
    """Whether a test module uses the ``spark`` fixture (tests/loadtest/conftest.py)."""
    try:
        return "spark" in module.read_text()
    except OSError:
        return False


def make_scheduler(config: Any, log: Any) -> SuiteScheduling | None:
    """The scheduler for ``--dist loadgroup`` (None: xdist's own for any other mode)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return SuiteScheduling(config, log)
