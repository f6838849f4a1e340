"""Kafka behaviours a node meets on a real broker: transactions on the input topic, a target
topic that does not exist (the broker does not create topics), records deleted before intake
read them. The broker and Postgres are real."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import REGISTRY

from chronos.protocol import DEAD_LETTER_REASON_HEADER, TOPIC_HEADER
from tests.integration.nodes import (
    Headers,
    Nodes,
    chronos_record,
    fire_ms,
    headers_of,
    ms,
    now,
    produce,
    read,
    tid_of,
)
from tests.support import Topics

TRANSACTIONS = 6  # alternately committed and aborted
PER_TRANSACTION = 3


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


def gap_counts() -> tuple[float, float]:
    """(gaps seen, seeks back) so far in this process."""
    gaps = sum(
        sample("chronos_intake_offset_gaps_total", {"outcome": outcome})
        for outcome in ("recovered", "confirmed")
    )
    return gaps, sample("chronos_intake_offset_gap_rereads_total")


def test_only_committed_transactions_are_scheduled_and_their_gaps_cost_few_seeks(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    nodes.start(intake_process="thread")  # the counters are read in this process
    gaps_before, seeks_before = gap_counts()
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(10)
    due = now() + timedelta(seconds=2)
    committed: set[str] = set()
    for t in range(TRANSACTIONS):
        producer.begin_transaction()
        for n in range(PER_TRANSACTION):
            sent = chronos_record(f"tx{t}-{n}", due)
            # One partition: every marker and aborted record is a gap before the next record.
            producer.produce(
                topics.input, key=b"k", value=b"v", headers=cast(Any, sent.headers), partition=0
            )
        if t % 2 == 0:
            producer.commit_transaction(10)
            committed |= {f"tx{t}-{n}" for n in range(PER_TRANSACTION)}
        else:
            # Written first, so the aborted records are in the log (gaps intake steps over);
            # an abort racing the partition's registration in the transaction is refused by
            # the broker as INVALID_TXN_STATE, fatal to librdkafka's producer (its issue 4849).
            assert producer.flush(10) == 0
            producer.abort_transaction(10)

    out = read(kafka_bootstrap, topics.output, topics.partitions, len(committed), settle=1.0)
    assert sorted(tid_of(r) for r in out) == sorted(committed)
    gaps, seeks = (a - b for a, b in zip(gap_counts(), (gaps_before, seeks_before), strict=True))
    print(f"transactions: {TRANSACTIONS}, offset gaps seen: {gaps:.0f}, seeks back: {seeks:.0f}")
    assert gaps >= 1  # the markers and aborted records leave gaps intake steps over
    assert seeks <= 2 * gaps and seeks <= 2 * TRANSACTIONS, (gaps, seeks)


def test_a_target_topic_that_does_not_exist_is_dead_lettered_and_nothing_else_waits(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    missing = f"{topics.input}-missing"  # allowed, never created (the broker creates none)
    nodes.start(allowed_topics=f"{topics.input}-*")
    start = now()
    target: Headers = [(TOPIC_HEADER, missing.encode())]
    lost = chronos_record("lost", start + timedelta(milliseconds=500), after=target)
    others = [chronos_record(f"on-time-{n}", start + timedelta(seconds=1 + n)) for n in range(5)]
    produce(kafka_bootstrap, topics.input, [lost, *others])

    out = read(kafka_bootstrap, topics.output, topics.partitions, len(others), timeout=20)
    assert sorted(tid_of(r) for r in out) == sorted(s.test_id for s in others)
    due = {s.test_id: ms(s.deadline or start) for s in others}
    for record in out:  # none waited for the lost one
        late_ms = fire_ms(record) - due[tid_of(record)]
        assert late_ms < 1000, (tid_of(record), late_ms)
    dead = read(kafka_bootstrap, topics.dead_letter, topics.partitions, 1, timeout=60, settle=0.5)
    assert [tid_of(r) for r in dead] == ["lost"]
    reasons = [v for n, v in headers_of(dead[0]) if n == DEAD_LETTER_REASON_HEADER]
    assert reasons and reasons[0] is not None and missing in reasons[0].decode(), reasons
    print(f"dead-lettered {(fire_ms(dead[0]) - ms(start)) / 1000:.1f} s after it was sent")


def send(bootstrap: str, topic: str, prefix: str, count: int) -> list[str]:
    """``count`` messages due in a second, ids ``prefix-0``..., to partition 0 of ``topic``."""
    producer = Producer({"bootstrap.servers": bootstrap})
    due = now() + timedelta(seconds=1)
    for n in range(count):
        sent = chronos_record(f"{prefix}-{n}", due)
        producer.produce(topic, key=b"k", value=b"v", headers=cast(Any, sent.headers), partition=0)
    assert producer.flush(10) == 0
    return [f"{prefix}-{n}" for n in range(count)]


def test_records_deleted_before_intake_read_them_are_counted_and_intake_goes_on(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    node = nodes.start(intake_process="thread")
    before = send(kafka_bootstrap, topics.input, "before", 2)
    assert len(read(kafka_bootstrap, topics.output, topics.partitions, 2, settle=0)) == 2
    nodes.stop(node)  # its offsets committed: partition 0 resumes at 2
    resets = sample("chronos_intake_offsets_out_of_range_total")
    send(kafka_bootstrap, topics.input, "gone", 3)  # offsets 2-4
    after = send(kafka_bootstrap, topics.input, "after", 2)  # offsets 5-6
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(topics.input, 0, 5)]).values():
        future.result(10)

    nodes.start(intake_process="thread")
    out = read(kafka_bootstrap, topics.output, topics.partitions, 4, timeout=20)
    assert sorted(tid_of(r) for r in out) == sorted(before + after)  # not reset to the end
    assert sample("chronos_intake_offsets_out_of_range_total") - resets == 1


def test_an_input_topic_recreated_under_the_node_is_read_from_its_start(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    """The input topic deleted and created again while a node consumes it: the node's position
    is past the new log's end, the broker answers "out of range" and the consumer starts the
    new log from its beginning (counted); nothing of the new topic is skipped."""

    nodes.start(intake_process="thread")
    before = send(kafka_bootstrap, topics.input, "old", 5)
    assert len(read(kafka_bootstrap, topics.output, topics.partitions, 5, settle=0)) == 5
    resets = sample("chronos_intake_offsets_out_of_range_total")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_topics([topics.input]).values():
        future.result(10)
    deadline = time.monotonic() + 30
    while True:  # the deletion completes in the background: "already exists" until then
        (future,) = admin.create_topics([NewTopic(topics.input, topics.partitions, 1)]).values()
        try:
            future.result(10)
            break
        except KafkaException as exc:
            assert exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, exc
            assert time.monotonic() < deadline, "the input topic could not be created again"
            time.sleep(0.5)
    after = send(kafka_bootstrap, topics.input, "new", 2)  # offsets 0-1 of the new log
    out = read(kafka_bootstrap, topics.output, topics.partitions, 7, timeout=30)
    assert sorted(tid_of(r) for r in out) == sorted(before + after)
    assert sample("chronos_intake_offsets_out_of_range_total") - resets >= 1
