"""How ``make test`` shares the suite between its two workers (pytest-xdist, ``--dist
loadgroup``): every test on its own, as the load scheduler does, but the fault scenarios all on
one worker, one after another. Each scenario stops, freezes or kills what its worker shares (its
Postgres, its broker), and their bounds were set for one scenario at a time.

The grouping is this scheduler's own rule, not the ``xdist_group`` mark: pytest-xdist 3.8 marks a
group by renaming the test's node id, which pytest 9 no longer lets it do, so the mark groups
nothing (two scenarios ran at once, one per worker)."""

from __future__ import annotations

from typing import Any

from xdist.scheduler.loadgroup import LoadGroupScheduling

FAULT_GROUP = "fault"
FAULT_TIER = "tests/fault/"


class FaultScenariosTogether(LoadGroupScheduling):
    def _split_scope(self, nodeid: str) -> str:
        if nodeid.startswith(FAULT_TIER):
            return FAULT_GROUP
        return str(super()._split_scope(nodeid))


def make_scheduler(config: Any, log: Any) -> FaultScenariosTogether | None:
    """The scheduler for ``--dist loadgroup`` (None: xdist's own for any other mode)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    return FaultScenariosTogether(config, log)
