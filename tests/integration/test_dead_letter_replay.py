"""Replaying dead letters on the real broker and Postgres (chronos.admin.deadletters.replay):
a scheduled message the firing path dead-lettered (its target topic missing, or expired) fires
once, at once, to its own topic when replayed, key, value and headers byte-exact; and two
replays of the same topic at once (two nodes' consoles, the console and the command line)
replay each record once: the later claim fences the earlier, which stops."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from kafka import KafkaProducer

from chronos.admin.deadletters import replay as replay_module
from chronos.admin.deadletters.replay import Progress, Replayer
from chronos.admin.deadletters.topic import DeadLetterTopic, ReplayTakenOver
from chronos.config.settings import Settings
from chronos.embedded import create_topics
from chronos.protocol import (
    DEADLINE_HEADER,
    MESSAGE_ID_HEADER,
    TENANT_HEADER,
    TOPIC_HEADER,
    ScheduledMessage,
    dead_letter_headers,
)
from chronos.store import PostgresStore
from tests.integration.nodes import Nodes, chronos_record, headers_of, now, produce, read
from tests.support import Topics, make_settings

pytestmark = pytest.mark.integration

HEADERS = [("h", b"\x00\x01"), ("h", None), ("e", b"")]


def _replay(settings: Settings, code: str) -> Progress:
    with DeadLetterTopic(settings) as dlq:
        return Replayer(dlq, lambda _p: None).by_code(code)


def test_a_firing_path_dead_letter_replayed_fires_once_to_its_own_topic(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    missing = f"{topics.input}-missing"  # allowed, not created yet: publishing it fails
    routed = f"{topics.input}-routed"
    create_topics(kafka_bootstrap, {routed: 1})
    # Stored, then the cluster was away for an hour: "stale" expires at firing.
    store = PostgresStore(nodes.database_url)
    stale = ScheduledMessage(
        "stale", now() + timedelta(hours=1), b"\x00k", b"v1", HEADERS, target_topic=routed
    )
    store.enqueue([stale], 0)
    store.close()
    with psycopg.connect(nodes.database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE chronos_messages SET deadline = now() - interval '1 hour' WHERE id = 'stale'"
        )
    node = nodes.start(allowed_topics=f"{topics.input}-*", max_lateness_ms=60_000)
    lost = chronos_record(
        "lost",
        now() + timedelta(milliseconds=300),
        key=b"\xff",
        value=b"v2",
        before=[("h", b"first")],
        after=[(TOPIC_HEADER, missing.encode()), (TENANT_HEADER, b"acme"), ("h", None)],
    )
    produce(kafka_bootstrap, topics.input, [lost])
    dead = read(kafka_bootstrap, topics.dead_letter, topics.partitions, 2, timeout=60, settle=0.5)
    assert len(dead) == 2, [headers_of(d) for d in dead]

    create_topics(kafka_bootstrap, {missing: 1})  # the cause fixed, as the docs say: replay
    failed = _replay(node.settings, "publish_failed")
    expired = _replay(node.settings, "expired")
    assert (failed.replayed, failed.refused, expired.replayed, expired.refused) == (1, 0, 1, 0)

    (fired,) = read(kafka_bootstrap, missing, 1, 1, timeout=30, settle=2.0)
    assert (fired.key(), fired.value()) == (b"\xff", b"v2")
    assert headers_of(fired) == _relayed(lost)
    (again,) = read(kafka_bootstrap, routed, 1, 1, timeout=30, settle=0.5)
    assert (again.key(), again.value(), headers_of(again)) == (b"\x00k", b"v1", HEADERS)
    assert read(kafka_bootstrap, topics.output, topics.partitions, 0, timeout=1) == []

    # Replayed once: a second replay names them already replayed, and nothing fires again.
    twice = _replay(node.settings, "publish_failed")
    assert (twice.replayed, twice.skipped) == (0, 1)
    assert len(read(kafka_bootstrap, missing, 1, 1, timeout=10, settle=2.0)) == 1
    assert len(read(kafka_bootstrap, routed, 1, 1, timeout=10, settle=0.5)) == 1


def _dead_letters(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """``count`` dead letters of intake (topic_not_allowed) on partition 0 of ``topic``."""
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    values = [f"r{n}".encode() for n in range(count)]
    for value in values:
        original = [
            (MESSAGE_ID_HEADER, value),
            (DEADLINE_HEADER, b"2030-01-01T00:00:00.000Z"),
            (TOPIC_HEADER, b"gone"),
        ]
        headers = dead_letter_headers(original, "not allowed", "in/0/1", "topic_not_allowed")
        producer.send(topic, key=value, value=value, headers=headers, partition=0)
    producer.flush(30)
    producer.close()
    return values


def test_two_replays_at_once_replay_each_record_once(
    kafka_bootstrap: str, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second replay starts while the first is between two batches (one record each): it
    fences the first, whose next batch is refused; between them every record went once."""
    values = _dead_letters(kafka_bootstrap, topics.dead_letter, 6)
    settings = make_settings("postgresql://unused/db", kafka_bootstrap, topics)
    monkeypatch.setattr(replay_module, "BATCH", 1)
    second: list[Progress] = []

    def between_batches(progress: Progress) -> None:
        if not second and progress.replayed == 2:  # the first is two batches in
            second.append(_replay(settings, "topic_not_allowed"))

    with DeadLetterTopic(settings) as dlq, pytest.raises(ReplayTakenOver) as stopped:
        Replayer(dlq, between_batches).by_code("topic_not_allowed")
    assert "another replay" in str(stopped.value) and "after 2 records" in str(stopped.value)
    ((later,),) = [second]
    assert (later.replayed, later.skipped) == (4, 2)

    # Intake's view of the input topic (committed transactions only): each record once.
    replayed = read(kafka_bootstrap, topics.input, topics.partitions, 6, timeout=30, settle=2.0)
    assert sorted(r.value() or b"" for r in replayed) == sorted(values)
    # And a third replay finds every one replayed.
    third = _replay(settings, "topic_not_allowed")
    assert (third.replayed, third.skipped) == (0, 6)


def _relayed(sent: Any) -> list[tuple[str, bytes | None]]:
    """What a record sent to the input topic fires with: its headers but Chronos's."""
    return [
        (n, v)
        for n, v in sent.headers
        if n not in (MESSAGE_ID_HEADER, DEADLINE_HEADER, TOPIC_HEADER, TENANT_HEADER)
    ]
