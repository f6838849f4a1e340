"""KafkaPublisher.warm over a stand-in for librdkafka's Producer: warm once it has the topic's
metadata, is connected to every partition's leader and holds its idempotence id (as its
statistics say); it produces nothing."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError, KafkaException

from chronos.kafka import KafkaPublisher, producer_config
from chronos.kafka import clients as kafka
from tests.unit.helpers import OUTPUT, settings


class LibProducer:
    """The metadata and statistics of confluent_kafka.Producer, nothing else."""

    leaders: ClassVar[dict[int, int]] = {0: 1, 1: 2}
    answers = True

    def __init__(self, config: dict[str, Any]):
        self.config = config
        self.produced = 0

    def list_topics(self, topic: str, timeout: float) -> Any:
        if not self.answers:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        partitions = {p: SimpleNamespace(leader=b) for p, b in self.leaders.items()}
        return SimpleNamespace(topics={topic: SimpleNamespace(error=None, partitions=partitions)})

    def stats(self, up: dict[int, str], idemp_state: str = "Assigned") -> None:
        brokers = {
            f"127.0.0.1:909{n}/{n}": {"nodeid": n, "state": state} for n, state in up.items()
        }
        brokers["127.0.0.1:9091/bootstrap"] = {"nodeid": -1, "state": "UP"}
        self.config["stats_cb"](
            json.dumps({"brokers": brokers, "eos": {"idemp_state": idemp_state}})
        )

    def produce(self, *args: Any, **kwargs: Any) -> None:
        self.produced += 1


@pytest.fixture
def publisher(monkeypatch: pytest.MonkeyPatch) -> KafkaPublisher:
    monkeypatch.setattr(kafka, "Producer", LibProducer)
    return KafkaPublisher(producer_config(settings(), "firing"))


def lib(publisher: KafkaPublisher) -> LibProducer:
    return publisher._producer  # type: ignore[return-value]


def test_the_firing_producer_connects_to_every_broker_and_reports_statistics() -> None:
    conf = producer_config(settings(), "firing")
    assert conf["enable.sparse.connections"] is False
    assert int(conf["statistics.interval.ms"]) > 0
    assert "enable.sparse.connections" not in producer_config(settings(), "intake")


def test_warm_once_connected_to_every_leader_with_its_idempotence_id(
    publisher: KafkaPublisher,
) -> None:
    producer = lib(publisher)
    assert not publisher.warm(OUTPUT, 1.0)  # no statistics yet
    producer.stats({1: "UP", 2: "CONNECT"})
    assert not publisher.warm(OUTPUT, 1.0)  # the leader of partition 1 is not connected
    producer.stats({1: "UP", 2: "UP"}, idemp_state="WaitPID")
    assert not publisher.warm(OUTPUT, 1.0)  # no idempotence id yet: a first record would wait
    producer.stats({1: "UP", 2: "UP"})
    assert publisher.warm(OUTPUT, 1.0)
    assert producer.produced == 0


def test_not_warm_while_the_broker_does_not_answer_or_a_partition_has_no_leader(
    publisher: KafkaPublisher, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer = lib(publisher)
    producer.stats({1: "UP", 2: "UP"})
    monkeypatch.setattr(LibProducer, "answers", False)
    assert not publisher.warm(OUTPUT, 1.0)
    monkeypatch.setattr(LibProducer, "answers", True)
    monkeypatch.setattr(LibProducer, "leaders", {0: 1, 1: -1})
    assert not publisher.warm(OUTPUT, 1.0)


def test_without_statistics_the_metadata_is_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator who turned the producer's statistics off (CHRONOS_PRODUCER__STATISTICS_
    INTERVAL_MS=0) still gets a node that becomes ready."""
    monkeypatch.setattr(kafka, "Producer", LibProducer)
    conf = producer_config(settings(producer_properties={"statistics.interval.ms": "0"}), "firing")
    publisher = KafkaPublisher(conf)
    assert "stats_cb" not in lib(publisher).config
    assert publisher.warm(OUTPUT, 1.0)
