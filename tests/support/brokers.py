"""A three-node Apache Kafka cluster seen from a fault test: where the partition leaders are,
which node is the active controller (the KRaft quorum leader), and whether every replica is
back in sync after a node returned."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable
from datetime import datetime

from confluent_kafka.admin import AdminClient

from chronos.embedded import create_topics
from chronos.embedded.kafka.cluster import EmbeddedKafkaCluster
from tests.support.kafka import TEST_PARTITIONS, Topics, new_topic_names, topic_metadata

# "[2026-11-26 17:22:49,648] INFO [RaftManager id=2] Completed transition to Leader(..."
_LEADER_LINE = re.compile(
    r"^\[(?P<at>[^\]]+)\] INFO \[RaftManager id=(?P<id>\d+)\] Completed transition to Leader"
)


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 3000})


def replicated_topics(bootstrap: str, label: str, partitions: int = TEST_PARTITIONS) -> Topics:
    """Input, output and dead-letter topics with 3 replicas and ``min.insync.replicas`` 2."""
    topics = new_topic_names(label, partitions)
    create_topics(
        bootstrap,
        {name: partitions for name in topics.names},
        replication=3,
        config={"min.insync.replicas": "2"},
    )
    return topics


def leaders(bootstrap: str, topic_names: Iterable[str]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> id of the node leading it (-1: none)."""
    topics = topic_metadata(admin(bootstrap), list(topic_names))
    return {
        (name, p.id): p.leader for name, meta in topics.items() for p in meta.partitions.values()
    }


def group_coordinator(bootstrap: str, group: str) -> int:
    """The node id of the broker coordinating consumer group ``group``."""
    client = admin(bootstrap)  # held until the answer: its thread serves the future
    futures = client.describe_consumer_groups([group], request_timeout=10)
    return int(futures[group].result(timeout=15).coordinator.id)


def busiest_leader(bootstrap: str, topic_names: Iterable[str]) -> tuple[int, int]:
    """(node id, partitions it leads) of the node leading the most of ``topic_names``."""
    counts = Counter(leaders(bootstrap, topic_names).values())
    node, count = max(sorted(counts.items()), key=lambda item: item[1])
    return node, count


def out_of_sync(bootstrap: str) -> int:
    """Partitions (of every topic) whose in-sync replicas are fewer than their replicas."""
    metadata = admin(bootstrap).list_topics(timeout=10)
    return sum(
        len(p.isrs) < len(p.replicas)
        for t in metadata.topics.values()
        for p in t.partitions.values()
    )


def wait_in_sync(bootstrap: str, timeout: float = 90.0) -> float:
    """Seconds until every replica of every partition is in sync; AssertionError if not."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if out_of_sync(bootstrap) == 0:
                return time.monotonic() - start
        except Exception:  # noqa: BLE001 - a node still starting; ask again
            pass
        time.sleep(0.25)
    raise AssertionError(f"replicas not back in sync within {timeout:.0f} s")


def active_controller(cluster: EmbeddedKafkaCluster) -> int:
    """Id of the running node that last became KRaft quorum leader (from the nodes' logs)."""
    latest: tuple[str, int] | None = None
    for node in cluster.nodes:
        if not node.running or not node.log_path.exists():
            continue
        for line in node.log_path.read_text(errors="replace").splitlines():
            match = _LEADER_LINE.match(line)
            if match and (latest is None or match["at"] > latest[0]):
                latest = (match["at"], int(match["id"]))
    if latest is None:
        raise AssertionError("no node's log names a quorum leader")
    return latest[1]


def node_index(cluster: EmbeddedKafkaCluster, node_id: int) -> int:
    return next(i for i, n in enumerate(cluster.nodes) if n.node_id == node_id)


_CHANGE_LINE = re.compile(
    r"^\[(?P<at>[^\]]+)\] \w+ (?P<what>.*(?:Fencing broker|Completed transition to Leader|"
    r"has been unfenced|handleBrokerFenced|Starting controlled shutdown|Loaded classic group|"
    r"Preparing to rebalance|Stabilized group|session timeout|has been removed).*)$"
)


def cluster_digest(cluster: EmbeddedKafkaCluster, since: float, limit: int = 20) -> list[str]:
    """The brokers' quorum and fencing changes since ``since`` (epoch seconds), each with its
    second after ``since``: what a failed scenario's message shows of the cluster."""
    changes: list[tuple[float, str]] = []
    for node in cluster.nodes:
        if not node.log_path.exists():
            continue
        for line in node.log_path.read_text(errors="replace").splitlines():
            match = _CHANGE_LINE.match(line)
            if match is None:
                continue
            try:
                at = datetime.strptime(match["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            except ValueError:
                continue
            if at >= since:
                changes.append((at - since, f"broker {node.node_id}: {match['what'][:120]}"))
    return [f"+{at:.1f}s {what}" for at, what in sorted(changes)[:limit]]
