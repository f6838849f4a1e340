"""The node launcher shared by ``chronos dev``, the benchmark and the fault suite."""

from __future__ import annotations

import sys
from pathlib import Path

from chronos.embedded import launcher

TEXT = """# HELP chronos_assigned_partition 1 for each input-topic partition assigned
# TYPE chronos_assigned_partition gauge
chronos_assigned_partition{partition="1",topic="in"} 1.0
chronos_assigned_partition{partition="4",topic="in"} 1.0
# TYPE chronos_fired_messages_total counter
chronos_fired_messages_total 7.0
"""


def test_metrics_are_read_with_the_prometheus_parser() -> None:
    samples = launcher.parse_metrics(TEXT)
    assert launcher.Sample("chronos_fired_messages_total", {}, 7.0) in samples
    assigned = {s.labels["partition"] for s in samples if s.name == "chronos_assigned_partition"}
    assert assigned == {"1", "4"}


def test_a_child_is_launched_logged_and_stopped(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    child = launcher.launch(
        "sleeper",
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
        env=launcher.child_environment(),
        log_path=log,
    )
    assert child.alive()
    assert not child.ready()  # no HTTP server
    codes = launcher.stop_all([child], timeout=10)
    assert codes["sleeper"] is not None and not child.alive()


def test_waiting_for_a_child_that_dies_says_so() -> None:
    child = launcher.launch(
        "quitter", [sys.executable, "-c", "raise SystemExit(3)"], env=launcher.child_environment()
    )
    child.process.wait(10)
    assert (
        launcher.wait_ready([child], timeout=5) == "quitter exited with code 3 before it was ready"
    )
    assert launcher.wait_assigned([child], "in", 2, timeout=5) == "quitter exited with code 3"
