"""chronosAction and chronosTopic end to end: an in-process node, the real Postgres and broker."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta

import psycopg
import pytest
from confluent_kafka import Producer

from chronos import client
from chronos.embedded import create_topics
from chronos.protocol import DEAD_LETTER_REASON_HEADER, MESSAGE_ID_HEADER
from tests.integration.nodes import (
    TEST_ID,
    Nodes,
    fire_ms,
    headers_of,
    ms,
    now,
    read,
    rows,
    tid_of,
)
from tests.support import Topics
from tests.support.polling import eventually

pytestmark = pytest.mark.integration

ADVANCE = 50


def markers(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("SELECT id FROM chronos_cancels").fetchall()}


def producer(bootstrap: str) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})


def test_cancels_before_the_deadline_and_before_the_schedule_win(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    nodes.start(timing_advance_ms=ADVANCE, cancel_ttl_ms=60_000)
    p = producer(kafka_bootstrap)
    due = now() + timedelta(seconds=3)
    # cancelled while waiting (same key: same partition, in order)
    client.schedule(
        p,
        value=b"a",
        key=b"k-a",
        deadline=due,
        message_id="a",
        topic=topics.input,
        headers=[(TEST_ID, b"a")],
    )
    # a cancel that arrives before its schedule (another key: another partition, produced first)
    client.cancel(p, "b", key=b"cancel-first", topic=topics.input)
    assert p.flush(10) == 0
    assert eventually(lambda: [r[0] for r in rows(nodes.database_url)] == ["a"])
    assert eventually(lambda: "b" in markers(nodes.database_url))
    client.cancel(p, "a", key=b"k-a", topic=topics.input)
    assert p.flush(10) == 0
    assert eventually(lambda: rows(nodes.database_url) == [], timeout=10)
    client.schedule(
        p,
        value=b"b",
        key=b"k-b",
        deadline=due,
        message_id="b",
        topic=topics.input,
        headers=[(TEST_ID, b"b")],
    )
    client.schedule(
        p,
        value=b"c",
        key=b"k-c",
        deadline=due,
        message_id="c",
        topic=topics.input,
        headers=[(TEST_ID, b"c")],
    )
    assert p.flush(10) == 0

    out = read(kafka_bootstrap, topics.output, topics.partitions, 1, settle=3.0)
    assert Counter(tid_of(r) for r in out) == Counter(["c"]), "only the message never cancelled"
    assert rows(nodes.database_url) == []


def test_reschedule_fires_once_at_the_new_deadline_with_the_new_payload(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    nodes.start(timing_advance_ms=ADVANCE)
    p = producer(kafka_bootstrap)
    first, second = now() + timedelta(seconds=2), now() + timedelta(seconds=5)
    client.schedule(
        p,
        value=b"old",
        key=b"k",
        deadline=first,
        message_id="r",
        topic=topics.input,
        headers=[(TEST_ID, b"old")],
    )
    client.reschedule(
        p,
        message_id="r",
        value=b"new",
        key=b"k",
        deadline=second,
        topic=topics.input,
        headers=[(TEST_ID, b"new")],
    )
    assert p.flush(10) == 0

    out = read(kafka_bootstrap, topics.output, topics.partitions, 1, timeout=20, settle=2.0)
    assert [(tid_of(r), r.value(), r.key()) for r in out] == [("new", b"new", b"k")]
    assert ms(second) - ADVANCE - 1 <= fire_ms(out[0]) <= ms(second) + 3000
    assert [n for n, _ in headers_of(out[0])] == [TEST_ID], "Chronos headers are not relayed"


def test_allowed_topic_is_fired_there_and_a_denied_one_dead_lettered(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    routed = f"routed-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_bootstrap, {routed: topics.partitions})
    nodes.start(timing_advance_ms=ADVANCE, allowed_topics="routed-*")
    p = producer(kafka_bootstrap)
    due = now() + timedelta(seconds=2)
    client.schedule(
        p,
        value=b"ok",
        deadline=due,
        message_id="ok",
        topic=topics.input,
        target_topic=routed,
        headers=[(TEST_ID, b"ok")],
    )
    client.schedule(
        p,
        value=b"no",
        deadline=due,
        message_id="no",
        topic=topics.input,
        target_topic="secret-topic",
        headers=[(TEST_ID, b"no")],
    )
    assert p.flush(10) == 0

    there = read(kafka_bootstrap, routed, topics.partitions, 1)
    assert [(tid_of(r), r.value()) for r in there] == [("ok", b"ok")]
    dead = read(kafka_bootstrap, topics.dead_letter, topics.partitions, 1)
    assert [tid_of(r) for r in dead] == ["no"]
    reason = dict(headers_of(dead[0]))[DEAD_LETTER_REASON_HEADER] or b""
    assert b"'secret-topic' is not allowed" in reason
    assert read(kafka_bootstrap, topics.output, topics.partitions, 0, timeout=1, settle=1) == []


def test_client_round_trip(nodes: Nodes, kafka_bootstrap: str, topics: Topics) -> None:
    nodes.start(timing_advance_ms=ADVANCE)
    p = producer(kafka_bootstrap)
    ids = [
        client.schedule(
            p,
            value=f"v{i}".encode(),
            key=f"k{i}",
            delay=1.5,
            topic=topics.input,
            headers=[(TEST_ID, f"t{i}")],
        )
        for i in range(20)
    ]
    assert p.flush(10) == 0
    out = read(kafka_bootstrap, topics.output, topics.partitions, 20)
    assert sorted((tid_of(r), r.key(), r.value()) for r in out) == sorted(
        (f"t{i}", f"k{i}".encode(), f"v{i}".encode()) for i in range(20)
    )
    assert len(set(ids)) == 20
    assert all(MESSAGE_ID_HEADER not in dict(headers_of(r)) for r in out)
