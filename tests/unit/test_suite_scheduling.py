"""How ``make test`` shares the suite between its two workers (``tests/support/scheduling.py``),
driven with fake workers: the fault group on one worker alone, the slow end of the queue to the
other, the fast end to the fault worker once its scenarios are nearly done."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.support.machine import EXCLUSIVE
from tests.support.scheduling import FAULT_GROUP, SPARK_GROUP, SuiteScheduling, queue_rank

COLLECTION = [
    "tests/unit/test_a.py::test_1",
    "tests/fault/test_01_x.py::test_1",
    "tests/unit/test_a.py::test_2",
    "tests/integration/test_b.py::test_1",
    "tests/fault/test_02_y.py::test_1",
    "tests/fault/test_02_y.py::test_2",
    "tests/loadtest/test_smoke.py::test_1",
    "tests/e2e/test_c.py::test_1",
    "tests/migration/test_d.py::test_1",
    "tests/unit/test_a.py::test_3",
]


class Worker:
    def __init__(self, name: str, collection: list[str] = COLLECTION) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.collection = collection
        self.shutting_down = False
        self.sent: list[list[str]] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append([self.collection[i] for i in indexes])

    def shutdown(self) -> None:
        self.shutting_down = True


def scheduler(tmp_path: Path) -> SuiteScheduling:
    config: Any = SimpleNamespace(
        rootpath=tmp_path,
        option=SimpleNamespace(loadscopereorder=True, tx=["popen"] * 2, numprocesses=2),
        getvalue=lambda name: {"tx": ["popen"] * 2, "numprocesses": 2}.get(name),
        getoption=lambda name, default=None: default,
    )
    return SuiteScheduling(config, SimpleNamespace(loadscopesched=print, loadgroupsched=print))


def test_the_queue_runs_from_the_fault_group_to_the_units() -> None:
    scopes = [FAULT_GROUP, "tests/unit/x.py::t", SPARK_GROUP, "tests/e2e/y.py::t", "other"]
    ranked = sorted(scopes, key=queue_rank)
    assert ranked == [FAULT_GROUP, SPARK_GROUP, "tests/e2e/y.py::t", "tests/unit/x.py::t", "other"]


def test_the_fault_worker_takes_from_the_fast_end_and_the_other_from_the_slow_end(
    tmp_path: Path,
) -> None:
    sched = scheduler(tmp_path)
    first, second = Worker("gw0"), Worker("gw1")
    for worker in (first, second):
        sched.add_node(worker)
        sched.add_node_collection(worker, COLLECTION)
    sched.schedule()
    # the first worker asks first and gets every fault scenario; the other the slowest tests,
    # one after another (xdist tops a worker up while it has at most two tests pending)
    assert first.sent == [[n for n in COLLECTION if n.startswith("tests/fault/")]]
    slowest = [["tests/loadtest/test_smoke.py::test_1"], ["tests/e2e/test_c.py::test_1"]]
    assert second.sent == slowest
    sched.mark_test_complete(second, COLLECTION.index("tests/loadtest/test_smoke.py::test_1"))
    assert second.sent[-1] == ["tests/integration/test_b.py::test_1"]
    # the fault worker, down to its last scenarios, takes the fast end: the last unit first
    sched.mark_test_complete(first, COLLECTION.index("tests/fault/test_01_x.py::test_1"))
    assert first.sent[-1] == ["tests/unit/test_a.py::test_3"]
    sched.mark_test_complete(second, COLLECTION.index("tests/e2e/test_c.py::test_1"))
    assert second.sent[-1] == ["tests/migration/test_d.py::test_1"]


def test_the_exclusive_modules_run_last_on_the_fault_worker(tmp_path: Path) -> None:
    """A module with an exclusive test joins the fault group (unless it runs Spark) and the
    group runs such modules last, when the other worker is down to short tests."""
    collection = [
        "tests/e2e/test_alone.py::test_1",
        "tests/fault/test_01_x.py::test_1",
        "tests/fault/test_02_alone.py::test_1",
        "tests/fault/test_02_alone.py::test_2",
        "tests/fault/test_03_z.py::test_1",
        "tests/loadtest/test_spark_alone.py::test_1",
        "tests/unit/test_a.py::test_1",
    ]
    for module, text in {
        # (the mark spelled from its name: this module must not look exclusive itself)
        "tests/e2e/test_alone.py": f"pytestmark = [pytest.mark.{EXCLUSIVE}]",
        "tests/fault/test_02_alone.py": f"@pytest.mark.{EXCLUSIVE}",
        "tests/loadtest/test_spark_alone.py": f"@pytest.mark.{EXCLUSIVE}\ndef test_1(spark): ...",
    }.items():
        (tmp_path / module).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / module).write_text(text)
    sched = scheduler(tmp_path)
    first, second = Worker("gw0", collection), Worker("gw1", collection)
    for worker in (first, second):
        sched.add_node(worker)
        sched.add_node_collection(worker, collection)
    sched.schedule()
    assert first.sent == [
        [
            "tests/fault/test_01_x.py::test_1",
            "tests/fault/test_03_z.py::test_1",
            "tests/e2e/test_alone.py::test_1",
            "tests/fault/test_02_alone.py::test_1",
            "tests/fault/test_02_alone.py::test_2",
        ]
    ]
    assert second.sent[0] == ["tests/loadtest/test_spark_alone.py::test_1"]  # its Spark group
