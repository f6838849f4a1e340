"""Per-test topics and consumer settings for the session's broker."""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import Consumer, Message
from confluent_kafka.admin import AdminClient

from chronos.embedded import create_topics
from chronos.protocol import DEADLINE_HEADER, MESSAGE_ID_HEADER, format_deadline

TEST_PARTITIONS = 3


def chronos_headers(message_id: str, deadline: datetime) -> list[tuple[str, bytes | None]]:
    """The two headers that make a record a Chronos message: its id and its deadline."""
    return [
        (MESSAGE_ID_HEADER, message_id.encode()),
        (DEADLINE_HEADER, format_deadline(deadline).encode()),
    ]


@dataclass(frozen=True)
class Topics:
    """The three topics of one test."""

    input: str
    output: str
    dead_letter: str
    partitions: int = TEST_PARTITIONS

    @property
    def names(self) -> tuple[str, str, str]:
        return (self.input, self.output, self.dead_letter)


def new_topic_names(label: str = "", partitions: int = TEST_PARTITIONS) -> Topics:
    """Unique input/output/dead-letter names (not created); ``label`` helps reading logs."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip("-")[:60]
    prefix = f"chronos-{stem}-{uuid.uuid4().hex[:8]}" if stem else f"chronos-{uuid.uuid4().hex[:8]}"
    return Topics(f"{prefix}-in", f"{prefix}-out", f"{prefix}-dlq", partitions)


def new_topics(bootstrap: str, label: str = "", partitions: int = TEST_PARTITIONS) -> Topics:
    """Create uniquely named input/output/dead-letter topics; ``label`` helps reading logs."""
    topics = new_topic_names(label, partitions)
    create_topics(bootstrap, {name: partitions for name in topics.names})
    return topics


def topic_metadata(admin: AdminClient, names: list[str], timeout: float = 30.0) -> dict[str, Any]:
    """``names``' metadata (name: TopicMetadata) once the broker answering knows each, with a
    leader for every partition. The brokers of a cluster learn of a new topic one after another:
    the one a metadata request reaches may not know yet of a topic another just created."""
    deadline = time.monotonic() + timeout
    while True:
        known = admin.list_topics(timeout=10).topics
        missing = [n for n in names if not _served(known.get(n))]
        if not missing:
            return {n: known[n] for n in names}
        if time.monotonic() > deadline:
            raise AssertionError(f"topics {missing} unknown to the brokers after {timeout:.0f} s")
        time.sleep(0.2)


def _served(meta: Any) -> bool:
    return (
        meta is not None
        and meta.error is None
        and bool(meta.partitions)
        and all(p.leader >= 0 for p in meta.partitions.values())
    )


def set_topic_config(bootstrap: str, topic: str, config: Mapping[str, str]) -> None:
    """Set ``config`` on ``topic`` (e.g. ``max.message.bytes`` for an input topic that takes
    records larger than a broker's default, as an operator may configure one)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in config.items()
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=10)


def delete_topics(bootstrap: str, topics: Topics, timeout: float = 5.0) -> None:
    """Best effort: leftover topics are harmless, they only cost the broker memory."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(list(topics.names), operation_timeout=timeout).values():
        with contextlib.suppress(Exception):  # best effort by design
            future.result(timeout=timeout)


TEST_CONSUMER_SESSION_MS = 6000
"""The session of the suite's own consumers (readers of the output topics, not Chronos nodes):
a test's reader that dies leaves its group in seconds."""


def consumer_config(bootstrap: str, group_id: str | None = None, **extra: Any) -> dict[str, Any]:
    """A consumer that reads from the beginning and joins its group quickly."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group_id or f"chronos-test-{uuid.uuid4().hex[:8]}",
        "auto.offset.reset": "earliest",
        "session.timeout.ms": TEST_CONSUMER_SESSION_MS,
        "enable.auto.commit": False,
    }
    config.update(extra)
    return config


def consume(
    bootstrap: str,
    topic: str,
    count: int,
    timeout: float = 30.0,
    config: Mapping[str, Any] | None = None,
) -> list[Message]:
    """Read ``count`` records of ``topic`` in a fresh group (fewer if ``timeout`` runs out)."""
    consumer = Consumer({**consumer_config(bootstrap), **(config or {})})
    records: list[Message] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(records) < count and time.monotonic() < deadline:
            for message in consumer.consume(count - len(records), timeout=0.5):
                if message.error() is None:
                    records.append(message)
    finally:
        consumer.close()
    return records
