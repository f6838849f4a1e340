"""The broker-driven consumer group protocol (KIP-848, ``CHRONOS_GROUP_PROTOCOL=consumer``) on
the real broker: two nodes share the input partitions, a node that stops hands its partitions to
the other in seconds, and every message fires once. (A node killed outright is taken over only
after the broker's ``group.consumer.session.timeout.ms``, 45 s by default: measured in
docs/reliability.md, too slow for this tier.)"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient

from tests.integration.nodes import Nodes, chronos_record, now, produce, read, rows, tid_of
from tests.support import Topics
from tests.support.polling import eventually

pytestmark = pytest.mark.integration


def test_the_broker_driven_protocol_shares_and_hands_over_the_input(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    first = nodes.start(group_protocol="consumer")
    second = nodes.start(group_protocol="consumer")  # waits until the two share the partitions
    group = first.settings.consumer_group
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(timeout=10)
    assert described.type == ConsumerGroupType.CONSUMER, described.type
    assert len(described.members) == 2

    due = now() + timedelta(seconds=2)
    before = [chronos_record(f"before-{i}", due, key=f"k{i}".encode()) for i in range(30)]
    produce(kafka_bootstrap, topics.input, before)
    stopped_at = time.monotonic()
    nodes.stop(second)
    intake: Any = first.state.loops["intake"][0]
    assert eventually(lambda: len(intake.assigned) == topics.partitions, timeout=15)
    print(f"handover after a node stopped: {time.monotonic() - stopped_at:.2f} s")
    after = [chronos_record(f"after-{i}", now(), key=f"k{i}".encode()) for i in range(30)]
    produce(kafka_bootstrap, topics.input, after)

    out = read(kafka_bootstrap, topics.output, topics.partitions, len(before) + len(after))
    assert Counter(tid_of(r) for r in out) == Counter(s.test_id for s in before + after)
    assert eventually(lambda: rows(nodes.database_url) == [])
