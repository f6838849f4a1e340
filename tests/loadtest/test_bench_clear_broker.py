"""Between two scenarios the bench keeps its warm broker and deletes the topics of the one
before (``Stack.clear_broker``): they are gone from the broker and from its disk before the
next scenario starts, and nothing else is touched."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from chronos.embedded import EmbeddedKafka, create_topics
from chronos.embedded.topics import admin_client
from loadtest.bench.stack import BROKER_SETTINGS, Stack, _partition_dirs


def test_partition_dirs_are_those_of_the_topics_live_or_deleted(tmp_path: Path) -> None:
    for name in ("bench-a-input-0", "bench-a-input-1.0f3c-delete", "bench-ab-input-0",
                 "other-0", "__consumer_offsets-0"):  # fmt: skip
        (tmp_path / name).mkdir()
    (tmp_path / "bench-a-input-9").write_text("a file, not a partition")

    found = _partition_dirs(tmp_path, ["bench-a-input"])

    assert sorted(found) == ["bench-a-input-0", "bench-a-input-1.0f3c-delete"]
    assert _partition_dirs(tmp_path / "absent", ["bench-a-input"]) == []


@pytest.mark.integration
def test_clear_broker_deletes_the_scenarios_topics_from_the_broker_and_its_disk(
    tmp_path: Path,
) -> None:
    stack = Stack(tmp_path / "data", tmp_path, 3, {"CHRONOS_AUDIT_TOPIC": "trail"})
    broker = EmbeddedKafka(0, log_dir=tmp_path)
    broker.extra = dict(BROKER_SETTINGS)
    stack.broker = broker
    try:
        stack.bootstrap = broker.start()
        create_topics(stack.bootstrap, {"kept": 1})
        before = stack.topics("one")  # with the audit topic the nodes write
        producer = Producer({"bootstrap.servers": stack.bootstrap})
        for topic in [*before.all(), "trail", "kept"]:
            for i in range(100):
                producer.produce(topic, b"x" * 100, key=str(i).encode())
        assert producer.flush(30) == 0
        log_dirs = broker.config().log_dirs
        assert len(_partition_dirs(log_dirs, before.all())) == 9

        started = time.monotonic()
        stack.clear_broker(timeout=60)
        took = time.monotonic() - started

        topics = set(admin_client(stack.bootstrap).list_topics(timeout=10).topics)
        assert not topics & {*before.all(), "trail"}
        assert _partition_dirs(log_dirs, [*before.all(), "trail"]) == []
        assert "kept" in topics and _partition_dirs(log_dirs, ["kept"]) == ["kept-0"]
        assert took < 10  # not a minute (Kafka's default), nor the 30 s before its first run
        after = stack.topics("two")  # the next scenario's topics, on the same broker
        assert set(after.all()) <= set(admin_client(stack.bootstrap).list_topics().topics)
    finally:
        broker.stop()
