"""Scenario 18 — with ``CHRONOS_HEADER_PROBE=process``, the crash quarantine's probe child
killed by the machine (the OOM killer's SIGKILL), not by the poison record it exists for, while
valid messages flow through a node.

Pass: no good record is dead-lettered or lost (a probe stopped by the machine blames nothing: it
is retried with back-off); every message fires once, nothing early; the node stays up and
reports the probe's failures (``header_probe_failed``, ``chronos_header_probe_failures_total``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fault.bounds import ON_TIME_MS
from tests.fault.injections import KILL_HEADER_PROBES, PROBE_KILLS_DIR_ENV, PROBE_KILLS_ENV
from tests.support import Topics
from tests.support.checker import ScenarioResult, due_in, expectations, record_result, send
from tests.support.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KILLS = 3


def test_a_probe_child_killed_by_the_machine_loses_no_good_record(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    cluster = make_cluster()
    markers = tmp_path / "probe-kills"
    markers.mkdir()
    node = cluster.start(
        env={
            "CHRONOS_HEADER_PROBE": "process",  # the forked probe (not the default)
            "CHRONOS_TEST_INJECT": KILL_HEADER_PROBES,
            PROBE_KILLS_ENV: str(KILLS),
            PROBE_KILLS_DIR_ENV: str(markers),
        }
    )
    cluster.wait_ready()
    messages = [due_in(2 + i / 100) for i in range(200)]
    send(kafka_bootstrap, topics.input, messages)
    report = cluster.check(expectations(messages), timeout=60, quiet=2.0)
    killed = len(list(markers.iterdir()))
    failures = node.events("header_probe_failed")
    record_result(
        ScenarioResult.of(
            "18-probe-killed",
            f"header probe child SIGKILLed {KILLS} times (as by the OOM killer)",
            report,
            None,
            probe_children_killed=killed,
            probe_failure_lines=len(failures),
        )
    )
    assert killed == KILLS, f"the fault did not hit: {killed} probe children killed"
    assert report.dead_lettered == {}, f"good records dead-lettered: {report.dead_lettered}"
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {} and report.duplicates == 0, report.summary()
    # Three probes retried with back-off (0.1 s doubling) hold a batch well under a second;
    # the messages are due 2 s or more after they are sent.
    assert report.late.max <= ON_TIME_MS, report.summary()
    assert failures, "the probe's failures were not reported"
    assert node.alive(), cluster.logs()
