"""The publisher's replacement of a stuck producer, on the real broker (the unit tests use a
model of librdkafka's purge): the session's broker frozen (SIGSTOP), every delivery of the
firing producer times out; once they have failed for twice the delivery timeout the publisher
replaces its producer, and the records, given back and produced again as the firing loop does,
go through the new producer and all reach the topic once the broker answers again."""

from __future__ import annotations

import signal
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError

from chronos.embedded import EmbeddedKafka
from chronos.kafka import KafkaPublisher, make_publisher
from chronos.observability.dependencies import KAFKA
from tests.support import Topics, make_settings

pytestmark = pytest.mark.integration

DELIVERY_TIMEOUT_MS = 1000  # stuck after twice that without a success
RECORDS = 20
UNUSED_DATABASE = "postgresql://chronos@127.0.0.1:1/unused"  # the publisher alone: no store


class Caller:
    """What the firing loop does with the publisher: produce each record, and produce a record
    whose delivery failed again (the row given back and claimed again); remember which
    producer (by the publisher's replacement count) delivered each."""

    def __init__(self, publisher: KafkaPublisher, topic: str) -> None:
        self.publisher = publisher
        self.topic = topic
        self.to_send: list[str] = []
        self.sent_on: dict[str, int] = {}  # key -> replacements when it was last produced
        self.delivered: dict[str, int] = {}  # key -> the producer that delivered it
        self.failures: list[KafkaError] = []

    def send(self, key: str) -> None:
        def report(err: KafkaError | None) -> None:
            if err is None:
                self.delivered[key] = self.sent_on[key]
            else:
                self.failures.append(err)
                self.to_send.append(key)

        self.publisher.produce(self.topic, key.encode(), b"v", [], report)
        # The producer it went to (a produce replaces a broken producer first).
        self.sent_on[key] = self.publisher.replacements

    def step(self) -> None:
        pending, self.to_send = self.to_send, []
        for key in pending:
            self.send(key)
        self.publisher.poll(0.1)


def _read_keys(bootstrap: str, topic: str, wanted: set[str], within_s: float) -> list[str]:
    """The keys of the topic's records, from the start, until every one of ``wanted`` is seen."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"replacement-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    keys: list[str] = []
    deadline = time.monotonic() + within_s
    try:
        while not wanted <= set(keys) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                keys.append((msg.key() or b"").decode())
    finally:
        consumer.close()
    return keys


def test_a_stuck_producer_is_replaced_and_its_records_go_through_the_new_one(
    embedded_broker: EmbeddedKafka, kafka_bootstrap: str, topics: Topics
) -> None:
    settings = make_settings(
        UNUSED_DATABASE,
        kafka_bootstrap,
        topics,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        hold_time_ms=30_000,
    )
    publisher = make_publisher(settings, "firing")
    caller = Caller(publisher, topics.output)
    deadline = time.monotonic() + 15
    while not publisher.warm(topics.output, 1.0) and time.monotonic() < deadline:
        publisher.poll(0.1)  # connected to the leader, its idempotence id held
    caller.send("before")
    while "before" not in caller.delivered and time.monotonic() < deadline:
        caller.step()
    assert "before" in caller.delivered, caller.failures
    caller.failures.clear()
    KAFKA.succeeded()  # the broker is up, as far as this process knows (a stuck producer)

    embedded_broker.signal(signal.SIGSTOP)
    try:
        for i in range(RECORDS):
            caller.send(f"r{i:02d}")
        deadline = time.monotonic() + 20
        while publisher.replacements == 0 and time.monotonic() < deadline:
            caller.step()
        assert publisher.replacements == 1, caller.failures
        assert not set(caller.delivered) - {"before"}  # nothing got through the frozen broker
    finally:
        embedded_broker.signal(signal.SIGCONT)

    deadline = time.monotonic() + 30
    while len(caller.delivered) < RECORDS + 1 and time.monotonic() < deadline:
        caller.step()
    publisher.flush(5)
    wanted = {f"r{i:02d}" for i in range(RECORDS)}
    assert set(caller.delivered) == wanted | {"before"}, caller.failures[-3:]
    # Each record that failed on the stuck producer was delivered by the new one.
    assert {key: caller.delivered[key] for key in wanted} == dict.fromkeys(wanted, 1)
    assert {e.code() for e in caller.failures} <= {
        KafkaError._MSG_TIMED_OUT,
        KafkaError._PURGE_INFLIGHT,
        KafkaError._PURGE_QUEUE,
        KafkaError._TIMED_OUT,
    }, caller.failures
    # None lost: the topic holds every record, at least once (a record the stuck producer had
    # in flight may reach the broker as well once it answers: a duplicate, never a loss).
    keys = _read_keys(kafka_bootstrap, topics.output, wanted | {"before"}, 30)
    assert set(keys) == wanted | {"before"}, sorted(keys)
