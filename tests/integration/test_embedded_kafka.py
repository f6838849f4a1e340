"""The embedded Apache Kafka: one node and a three-node quorum, started by Chronos's own code.

Each test runs its own nodes in ``tmp_path`` (the session's shared broker is not touched).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from chronos.embedded import EmbeddedKafka, EmbeddedKafkaCluster, create_topics
from chronos.embedded.kafka.broker import read_pids
from chronos.embedded.topics import admin_client
from tests.support import consume
from tests.support.kafka import topic_metadata

pytestmark = pytest.mark.integration


def _produce(bootstrap: str, topic: str, values: list[bytes], **config: object) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **config})
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    for value in values:
        producer.produce(topic, value, on_delivery=report)
    assert producer.flush(30) == 0
    assert errors == []


def test_one_node_serves_and_keeps_its_records_across_a_restart(tmp_path: Path) -> None:
    node = EmbeddedKafka(log_dir=tmp_path)
    try:
        started = time.monotonic()
        bootstrap = node.start()
        ready_s = time.monotonic() - started
        pid = node.pid
        assert read_pids(tmp_path / "broker.pid") == [pid]
        create_topics(bootstrap, {"kept": 2})
        _produce(bootstrap, "kept", [b"one", b"two"], acks="all")

        assert node.restart() == bootstrap

        assert node.pid != pid
        assert read_pids(tmp_path / "broker.pid") == [node.pid]
        _produce(bootstrap, "kept", [b"three"])
        records = consume(bootstrap, "kept", 3)
        assert sorted(m.value() or b"" for m in records) == [b"one", b"three", b"two"]
    finally:
        node.stop()
    assert not (tmp_path / "broker.pid").exists()
    assert "Kafka Server started" in (tmp_path / "broker.log").read_text()
    assert ready_s < 60


def test_topics_are_not_created_on_first_mention(tmp_path: Path) -> None:
    """``auto.create.topics.enable=false``, as production usually runs: producing to a topic
    nobody created fails instead of creating it."""
    with EmbeddedKafka(log_dir=tmp_path) as node:
        producer = Producer({"bootstrap.servers": node.bootstrap, "message.timeout.ms": 3000})
        failures: list[KafkaError | None] = []
        producer.produce("never-created", b"x", on_delivery=lambda err, _m: failures.append(err))
        producer.flush(10)
        assert [f.code() if f else None for f in failures] in (
            [KafkaError.UNKNOWN_TOPIC_OR_PART],
            [KafkaError._MSG_TIMED_OUT],
        )
        topics = admin_client(node.bootstrap).list_topics(timeout=10).topics
        assert "never-created" not in topics


def test_a_new_start_stops_the_node_a_killed_run_left_behind(tmp_path: Path) -> None:
    first = EmbeddedKafka(log_dir=tmp_path, die_with_parent=False)
    first.start()
    stray = first.pid
    assert stray is not None
    second = EmbeddedKafka(first.port, log_dir=tmp_path)
    try:
        second.start()  # same data dir and port: only possible once the stray is gone
        assert first._proc is not None and first._proc.poll() is not None
        assert second.pid != stray
    finally:
        second.stop()
        first.stop()


def test_three_nodes_form_one_quorum_and_survive_one_stopped(tmp_path: Path) -> None:
    cluster = EmbeddedKafkaCluster(3, log_dir=tmp_path)
    try:
        bootstrap = cluster.start()
        pids = read_pids(tmp_path / "broker.pids")
        assert pids == cluster.pids and len(set(pids)) == 3
        admin = admin_client(bootstrap)
        assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]
        create_topics(
            bootstrap, {"replicated": 3}, replication=3, config={"min.insync.replicas": "2"}
        )
        meta = topic_metadata(admin, ["replicated"])["replicated"]
        assert all(len(p.replicas) == 3 for p in meta.partitions.values())

        cluster.stop_node(1)
        assert read_pids(tmp_path / "broker.pids")[1] == 0

        # Two of three in sync: acks=all still succeeds, and nothing is lost.
        _produce(bootstrap, "replicated", [b"%d" % i for i in range(30)], acks="all")
        cluster.start_node(1)
        assert len(set(read_pids(tmp_path / "broker.pids"))) == 3
        records = consume(bootstrap, "replicated", 30)
        assert sorted(int(m.value() or b"") for m in records) == list(range(30))
    finally:
        cluster.stop()
    assert not (tmp_path / "broker.pids").exists()
