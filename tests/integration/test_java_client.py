"""The official Java client on both sides of a Chronos node, on the real broker: records the
Java producer sends with its default partitioner are scheduled, each fired record lands on the
partition the Java producer chose for its key, and the Java consumer reads the output byte for
byte (key, value, headers in order, null values kept).

Chronos's producers partition with ``murmur2_random`` (the Java client's murmur2), not
librdkafka's default ``consistent_random`` (CRC32): the keys below are chosen so that the two
disagree on some of them, so the test tells the two apart.
"""

from __future__ import annotations

import zlib
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from tests.integration.nodes import ON_TIME_MS, Nodes, chronos_record, ms, now, rows
from tests.support import Topics
from tests.support.java_client import JavaClient, JavaRecord
from tests.support.polling import eventually

pytestmark = pytest.mark.integration

ADVANCE_MS = 50


@pytest.fixture(scope="module")
def java_client(tmp_path_factory: pytest.TempPathFactory) -> JavaClient:
    return JavaClient.compile(Path(tmp_path_factory.mktemp("java-client")))


def test_java_producer_to_java_consumer_through_chronos(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics, java_client: JavaClient
) -> None:
    nodes.start(timing_advance_ms=ADVANCE_MS)
    due = now() + timedelta(seconds=3)
    due = due.replace(microsecond=due.microsecond // 1000 * 1000)
    every_byte = bytes(range(256))
    sent = [
        chronos_record(
            "binary",
            due,
            key=every_byte,
            value=every_byte[::-1],
            before=[("b", b"\x00\xff"), ("none", None)],
            after=[("empty", b""), ("b", b"repeat"), ("none", None), ("ütf", "✓".encode())],
        ),
        chronos_record("tombstone", due, key=b"gone", value=None),
        chronos_record("empty", due, key=b"", value=b""),
        chronos_record("null-key", due, key=None, value=b"\x00"),
        *(chronos_record(f"order-{i}", due, key=f"order-{i}".encode()) for i in range(24)),
    ]
    records = [JavaRecord(s.key, s.value, s.headers) for s in sent]

    chosen = java_client.produce(kafka_bootstrap, topics.input, records)
    # Every record is on the broker once the Java producer returned; one that arrived after its
    # deadline (the JVM's start is slow on a busy machine) fires at once: on time from then.
    on_the_broker_ms = ms(now())

    by_id = {s.test_id: (s, partition) for s, partition in zip(sent, chosen, strict=True)}
    crc32_differs = [
        s.test_id for s, p in by_id.values() if s.key and zlib.crc32(s.key) % topics.partitions != p
    ]
    assert crc32_differs, "librdkafka's CRC32 default would agree on every key: no discrimination"

    out = java_client.consume(kafka_bootstrap, topics.output, len(sent))

    tids = [dict(c.record.headers)["x-test-id"] for c in out]
    assert Counter(t.decode() for t in tids if t) == Counter(list(by_id)), "each once"
    for consumed, tid in zip(out, tids, strict=True):
        assert tid is not None
        s, partition = by_id[tid.decode()]
        assert consumed.record.key == s.key, s.test_id
        assert consumed.record.value == s.value, s.test_id  # a tombstone stays null
        assert consumed.record.headers == s.relayed_headers, s.test_id
        if s.key is not None:  # a null key has no partition of its own (Java: sticky)
            assert consumed.partition == partition, f"{s.test_id}: not the Java producer's choice"
        assert consumed.timestamp_ms >= ms(due) - ADVANCE_MS - 1, f"{s.test_id} fired early"
        late_ms = consumed.timestamp_ms - max(ms(due), on_the_broker_ms)
        assert late_ms <= ON_TIME_MS, f"{s.test_id} fired {late_ms} ms late"
    assert eventually(lambda: rows(nodes.database_url) == [])
