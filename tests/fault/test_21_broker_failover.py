"""Scenario 21 — a broker of a three-node Apache Kafka cluster goes away while 1,000 msg/s flow.

The topics have 3 replicas and ``min.insync.replicas`` 2; two Chronos nodes run; the load sends
1,000 messages a second, each due 2 to 10 s after it is sent. The fault comes after ``WARMUP_S``;
a stopped node stays down ``DOWN_S`` (``CHRONOS_TEST_OUTAGE_S``, default 15 s; 120 s for the
long variant), then starts again, and the load runs until its replicas are back in sync.

* **leader killed**: kill -9 of the node leading the most partitions of the input and output
  topics (their leadership moves once the controller fences it, ``broker.session.timeout.ms``).
* **controller killed**: kill -9 of the active controller (the KRaft quorum leader).
* **rolling restart**: every node in turn stopped cleanly (SIGTERM) and started again, the next
  one only once every replica is back in sync — what a managed Kafka's patching does.

Pass: lost 0, nothing early, duplicates at most the rows claimed when the fault struck (rows
produced but not yet acknowledged, taken over and produced again), no Chronos node restarts,
``/health/live`` answers 200 at every probe; lateness: max ≤ ``MAX_LATE_S`` and p99 ≤
``P99_LATE_S`` (kills), p99 ≤ ``ROLLING_P99_LATE_S`` over the whole rolling restart.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chronos.config.settings import OPTIONS_BY_NAME
from chronos.embedded.kafka_cluster import EmbeddedKafkaCluster
from tests.fault.test_16_dependency_outages import LivenessProbe
from tests.support.brokers import (
    active_controller,
    busiest_leader,
    node_index,
    replicated_topics,
    wait_in_sync,
)
from tests.support.checker import Load, Report, ScenarioResult, expectations, record_result
from tests.support.cluster import FAST_TIMINGS, Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RATE = 1000
DELAY = (2.0, 10.0)
WARMUP_S = 12.0  # the first messages (due 2-10 s ahead) are firing when the fault strikes
DOWN_S = float(os.environ.get("CHRONOS_TEST_OUTAGE_S", "15"))
TAIL_S = 3.0
MAX_LATE_S = 10.0
P99_LATE_S = 2.0
ROLLING_P99_LATE_S = 1.0
# Until the controller fences a dead broker (broker.session.timeout.ms, 9 s by default) every
# acks=all write to a partition it replicates waits, and the group coordinator it hosted does
# not move: a cluster meant to lose a broker without a lateness spike fences sooner (see
# docs/reliability.md for what the default gives).
BROKER_FAILOVER = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "1000"}
# The production defaults of every timing the fault suite usually shortens (logs stay JSON).
DEFAULTS: dict[str, Any] = {
    name: OPTIONS_BY_NAME[name].default for name in FAST_TIMINGS if name != "log_format"
}


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafkaCluster]:
    cluster = EmbeddedKafkaCluster(
        3, log_dir=tmp_path_factory.mktemp("brokers"), extra=BROKER_FAILOVER
    )
    cluster.start(timeout=180)
    yield cluster
    cluster.stop()


@pytest.fixture
def chronos(
    brokers: EmbeddedKafkaCluster,
    migrated_database_url: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Cluster]:
    """Two Chronos nodes on the three brokers; afterwards every broker runs and is in sync."""
    topics = replicated_topics(brokers.bootstrap, request.node.name)
    cluster = Cluster(
        migrated_database_url,
        brokers.bootstrap,
        topics,
        tmp_path / "cluster",
        **DEFAULTS,
    )
    yield cluster
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        print(cluster.logs())
    cluster.close()
    for index, node in enumerate(brokers.nodes):
        node.signal(signal.SIGCONT)
        if not node.running:
            brokers.start_node(index)
    wait_in_sync(brokers.bootstrap)


def under_load(cluster: Cluster, fault: Callable[[], None]) -> tuple[Report, dict[str, object]]:
    """Run the load, strike ``fault`` after the warm-up, check everything sent."""
    nodes = cluster.start_many(2)
    cluster.wait_ready()
    pids = {n.name: n.pid for n in nodes}
    load = Load(
        cluster.bootstrap,
        cluster.topics.input,
        rate=RATE,
        delay=DELAY,
        config={"enable.idempotence": True},
    ).start()
    time.sleep(WARMUP_S)
    claimed = cluster.table.claimed()
    probe = LivenessProbe(nodes)
    with probe.running():
        struck = time.time()
        fault()
        time.sleep(TAIL_S)
    messages = load.stop(timeout=60)
    report = cluster.check(expectations(messages), timeout=120, quiet=3.0)
    facts: dict[str, object] = {
        "claimed_at_fault": claimed,
        "fault_s": round(time.time() - struck - TAIL_S, 1),
        "liveness_probes": probe.probes,
        "liveness_failures": probe.failures[:3],
        "restarted": [n.name for n in nodes if not n.alive() or pids[n.name] != n.pid],
        "late_p99_s": round(report.late.p99 / 1000, 2),
        "late_max_s": round(report.late.max / 1000, 2),
    }
    return report, facts


def check(name: str, fault: str, report: Report, facts: dict[str, object], p99_s: float) -> None:
    record_result(ScenarioResult.of(name, fault, report, report.late.max / 1000, **facts))
    assert facts["restarted"] == [], f"Chronos nodes restarted: {facts}"
    assert facts["liveness_failures"] == [], f"liveness failed: {facts}"
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    assert report.duplicates <= int(str(facts["claimed_at_fault"])), report.summary()
    assert report.late.p99 <= p99_s * 1000, f"p99 lateness: {facts}; {report.summary()}"
    assert report.late.max <= MAX_LATE_S * 1000, f"max lateness: {facts}; {report.summary()}"


def kill_and_return(brokers: EmbeddedKafkaCluster, node_id: int) -> Callable[[], None]:
    def fault() -> None:
        index = node_index(brokers, node_id)
        brokers.nodes[index].signal(signal.SIGKILL)
        brokers.nodes[index].wait_stopped(10)
        time.sleep(DOWN_S)
        brokers.start_node(index)
        wait_in_sync(brokers.bootstrap)

    return fault


def test_leader_killed(brokers: EmbeddedKafkaCluster, chronos: Cluster) -> None:
    node_id, led = busiest_leader(brokers.bootstrap, [chronos.topics.input, chronos.topics.output])
    report, facts = under_load(chronos, kill_and_return(brokers, node_id))
    check(
        "21-broker-leader-killed",
        f"kill -9 of the broker leading {led} of 6 partitions, down {DOWN_S:.0f} s, 1,000 msg/s",
        report,
        {**facts, "killed_node": node_id},
        P99_LATE_S,
    )


def test_controller_killed(brokers: EmbeddedKafkaCluster, chronos: Cluster) -> None:
    node_id = active_controller(brokers)
    report, facts = under_load(chronos, kill_and_return(brokers, node_id))
    check(
        "21-broker-controller-killed",
        f"kill -9 of the active controller, down {DOWN_S:.0f} s, 1,000 msg/s",
        report,
        {**facts, "killed_node": node_id},
        P99_LATE_S,
    )


def test_rolling_restart(brokers: EmbeddedKafkaCluster, chronos: Cluster) -> None:
    def roll() -> None:
        for index in range(len(brokers.nodes)):
            brokers.stop_node(index)
            brokers.start_node(index)
            wait_in_sync(brokers.bootstrap)

    report, facts = under_load(chronos, roll)
    check(
        "21-broker-rolling-restart",
        "each of 3 brokers SIGTERMed and restarted in turn, 1,000 msg/s",
        report,
        facts,
        ROLLING_P99_LATE_S,
    )
