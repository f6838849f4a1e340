"""Scenario 25 — one Chronos node cut off from the brokers while Postgres stays reachable.

Two nodes share one Apache Kafka node; one of them (``cut``) reaches it only through a proxy
(:mod:`tests.support.partition`), the other directly. While messages flow, the proxy
black-holes the cut node's connections (nothing forwarded either way, nothing closed, new
connections accepted and never answered) for ``PARTITION_S``, then forwards again. The cut node
keeps its heartbeat and its claims in Postgres all along: nothing tells its peer it is gone.

Everything at the defaults. Pass: every row the cut node held when the partition began leaves
its hands (given back, taken over or deleted) within ``DETECTION_BOUND_S`` — it finds itself cut
off while its peer delivers (``chronos.firing.cutoff``), long before its delivery timeout or the
hold time — and from then on it holds at most ``WRITE_PROBE_ROWS`` claims (probes of whether its
writes work again); lost 0, nothing early, no node restarts, ``/health/live`` answers 200 at
every probe of both nodes; duplicates only of messages the cut node held claimed during the
partition (a produce it gave up on reaches the broker when the route is back) or read from the
input past the group's committed offsets when it began (read again by the node that takes the
partition over), and no more copies than those; lateness at most the partition's length or the
consumer session, whichever is shorter, plus a few seconds (the cut node's input partitions
wait for one or the other).

The CI variant runs at ``CI_RATE`` msg/s for ``PARTITION_S`` (15 s); the full-size one
(1,000 msg/s, due 2-10 s ahead, ``CHRONOS_TEST_OUTAGE_S`` or 20 s) runs with the other long
broker scenarios (``CHRONOS_TEST_BROKER_FAILOVER=1``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from chronos.firing.cutoff import ASK_EVERY_S, CUT_OFF_AFTER_S, HEARTBEAT_LAG_S
from chronos.firing.loop import WRITE_PROBE_ROWS
from chronos.kafka.config import SESSION_TIMEOUT_MS
from tests.fault.test_05_postgres_faults import committed_offsets
from tests.fault.test_16_dependency_outages import LivenessProbe
from tests.fault.test_21_broker_failover import readiness
from tests.support.checker import Load, ScenarioResult, expectations, record_result
from tests.support.cluster import SHIPPED_TIMINGS, Cluster, NodeProcess
from tests.support.kafka import new_topics
from tests.support.partition import PartitionableBroker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CI_RATE = 250
CI_DELAY = (2.0, 5.0)
CI_WARMUP_S = 6.0
CI_PARTITION_S = 15.0
FULL_RATE = 1000
FULL_DELAY = (2.0, 10.0)
FULL_WARMUP_S = 12.0
FULL_PARTITION_S = float(os.environ.get("CHRONOS_TEST_OUTAGE_S", "20"))
TAIL_S = 3.0

DEFAULTS: dict[str, Any] = dict(SHIPPED_TIMINGS)
# The cut node finds itself cut off (chronos.firing.cutoff): its deliveries stalled for
# CUT_OFF_AFTER_S, it asks within ASK_EVERY_S whether a peer delivered since (a peer's word is
# up to HEARTBEAT_LAG_S old), then gives everything back; a poll interval and a statement more.
DETECTION_BOUND_S = CUT_OFF_AFTER_S + ASK_EVERY_S + HEARTBEAT_LAG_S + 1.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PartitionableBroker]:
    with PartitionableBroker(tmp_path_factory.mktemp("partition-broker")) as broker:
        yield broker


@pytest.fixture
def chronos(
    broker: PartitionableBroker,
    migrated_database_url: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Cluster]:
    topics = new_topics(broker.direct, request.node.name)
    cluster = Cluster(
        migrated_database_url, broker.direct, topics, tmp_path / "cluster", **DEFAULTS
    )
    yield cluster
    broker.heal()
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        print(cluster.logs())
    cluster.close()


@dataclass
class Watch:
    """The cut node's claims during the partition, polled from the table every 0.1 s."""

    cut_at: float  # wall clock
    at_cut: dict[str, Any]
    samples: list[tuple[float, dict[str, Any]]] = field(default_factory=list)

    @property
    def held(self) -> set[str]:
        """Every row it held claimed during the partition."""
        return {i for _, claims in self.samples for i in claims} | set(self.at_cut)

    def released_s(self) -> float | None:
        """Seconds until none of the claims it had at the cut was still its claim."""
        for at, claims in self.samples:
            if not any(claims.get(i) == c for i, c in self.at_cut.items()):
                return round(at - self.cut_at, 1)
        return None

    def longest_hold_s(self) -> float:
        """The longest time one claim stayed its claim during the partition (from the cut)."""
        first: dict[tuple[str, Any], float] = {k: self.cut_at for k in self.at_cut.items()}
        last: dict[tuple[str, Any], float] = {}
        for at, claims in self.samples:
            for key in claims.items():
                first.setdefault(key, at)
                last[key] = at
        return round(max((last[k] - first[k] for k in last), default=0.0), 1)

    def most_since(self, since: float) -> int:
        """The most claims it held at once from ``since`` (wall clock) on."""
        return max((len(claims) for at, claims in self.samples if at >= since), default=0)


def watch_claims(cluster: Cluster, node: NodeProcess, seconds: float) -> Watch:
    watch = Watch(time.time(), cluster.table.claims_of(node.node_id))
    while time.time() - watch.cut_at < seconds:
        watch.samples.append((time.time(), cluster.table.claims_of(node.node_id)))
        time.sleep(0.1)
    return watch


def writes_failing_at(node: NodeProcess) -> float | None:
    """When the node logged that its writes to Kafka fail (wall clock), or None."""
    for event in node.events("dependency_down"):
        if event.get("dependency") == "kafka_writes":
            return datetime.fromisoformat(str(event["ts"])).timestamp()
    return None


def partition(
    broker: PartitionableBroker,
    cluster: Cluster,
    *,
    rate: int,
    delay: tuple[float, float],
    warmup_s: float,
    partition_s: float,
    cut_leads: bool,
    name: str,
) -> None:
    # The lowest node id leads (runs failure detection): the cut node or its peer.
    low, high = "00000000-0000-4000-8000-000000000001", "ffffffff-ffff-4fff-bfff-ffffffffffff"
    peer = cluster.start("peer", node_id=high if cut_leads else low)
    cut = cluster.start(
        "cut", kafka_bootstrap_servers=broker.proxied, node_id=low if cut_leads else high
    )
    nodes = [peer, cut]
    cluster.wait_ready()
    pids = {n.name: n.pid for n in nodes}
    load = Load(
        broker.direct,
        cluster.topics.input,
        rate=rate,
        delay=delay,
        config={"enable.idempotence": True},
    ).start()
    time.sleep(warmup_s)
    probe = LivenessProbe(nodes)
    with probe.running():
        committed = committed_offsets(cluster)
        broker.cut()
        watch = watch_claims(cluster, cut, partition_s)
        ready_cut = readiness(cut)
        broker.heal()
        time.sleep(TAIL_S)
    messages = load.stop(timeout=60)
    report = cluster.check(expectations(messages), timeout=120, quiet=3.0)
    # Read again by the node taking a partition over: what the group had not committed.
    # (Acknowledged up to half a second after the cut: every record appended before it.)
    uncommitted = {
        track
        for track, (p, offset, acked_at) in load.acked.items()
        if offset >= committed.get(p, 0) and acked_at <= watch.cut_at + 0.5
    }
    bound = watch.held | uncommitted
    beyond = {t: n for t, n in report.duplicated.items() if t not in bound}
    of_held = sum(n - 1 for t, n in report.duplicated.items() if t in watch.held)
    restarted = [n.name for n in nodes if not n.alive() or pids[n.name] != n.pid]
    failing_at = writes_failing_at(cut)
    # From one detection bound after its writes were known to fail, only probes are held.
    probing = None if failing_at is None else watch.most_since(failing_at + DETECTION_BOUND_S)
    released_s, longest_s = watch.released_s(), watch.longest_hold_s()
    record_result(
        ScenarioResult.of(
            name,
            f"one of 2 nodes ({'the leader' if cut_leads else 'not the leader'}) cut off from "
            f"the broker for {partition_s:.0f} s, {rate} msg/s",
            report,
            released_s,
            claimed_at_cut=len(watch.at_cut),
            held_during_partition=len(watch.held),
            uncommitted_at_cut=len(uncommitted),
            duplicates_of_held=of_held,
            released_s=released_s,
            longest_hold_s=longest_s,
            writes_failing_after_s=failing_at and round(failing_at - watch.cut_at, 1),
            most_claims_while_probing=probing,
            readiness_of_cut=ready_cut,
            liveness_probes=probe.probes,
            liveness_failures=probe.failures[:3],
            restarted=restarted,
            late_p50_s=round(report.late.p50 / 1000, 2),
            late_p99_s=round(report.late.p99 / 1000, 2),
            late_max_s=round(report.late.max / 1000, 2),
        )
    )
    assert restarted == [], f"Chronos nodes restarted: {restarted}"
    assert probe.failures == [], f"liveness failed: {probe.failures[:3]}"
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.early == {}, report.summary()
    # Its input partitions stay its own until the route is back or its consumer session ends
    # at the coordinator, whichever comes first: records sent to them meanwhile wait that long,
    # then are read, stored and fired at once (a few seconds).
    late_bound_s = min(partition_s, SESSION_TIMEOUT_MS / 1000) + 3.0
    assert report.late.max <= late_bound_s * 1000, (
        f"late beyond {late_bound_s} s: {report.summary()}"
    )
    assert longest_s <= DETECTION_BOUND_S, (
        f"the cut node held a claim {longest_s} s (bound {DETECTION_BOUND_S} s)"
    )
    assert probing is not None, "the cut node never found its writes failing"
    assert probing <= WRITE_PROBE_ROWS, f"held {probing} claims while its writes failed"
    assert beyond == {}, f"{len(beyond)} duplicated beyond the bound; {report.summary()}"
    assert report.duplicates <= len(bound), report.summary()


def test_partitioned_node(broker: PartitionableBroker, chronos: Cluster) -> None:
    partition(
        broker,
        chronos,
        rate=CI_RATE,
        delay=CI_DELAY,
        warmup_s=CI_WARMUP_S,
        partition_s=CI_PARTITION_S,
        cut_leads=True,
        name="25-broker-partition",
    )


@pytest.mark.skipif(
    os.environ.get("CHRONOS_TEST_BROKER_FAILOVER", "") != "1",
    reason="CHRONOS_TEST_BROKER_FAILOVER=1 runs it (1,000 msg/s, with the long broker scenarios)",
)
@pytest.mark.parametrize("cut_leads", [True, False], ids=["leader", "follower"])
def test_partitioned_node_full_size(
    broker: PartitionableBroker, chronos: Cluster, cut_leads: bool
) -> None:
    partition(
        broker,
        chronos,
        rate=FULL_RATE,
        delay=FULL_DELAY,
        warmup_s=FULL_WARMUP_S,
        partition_s=FULL_PARTITION_S,
        cut_leads=cut_leads,
        name=f"25-broker-partition-full-{'leader' if cut_leads else 'follower'}",
    )
