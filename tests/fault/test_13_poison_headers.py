"""Scenario 13 — a record that crashes the Kafka client: a header *name* that is not valid UTF-8.

confluent-kafka cannot read such a record's headers: ``Message.headers()`` fails, leaves a broken
list cached in the message, and the next touch of it kills the process with SIGSEGV. Before the
quarantine, a node that met one died before storing the batch's offsets, and every node that
inherited the partition replayed it and died too. kafka-python writes such a name when the
application hands it a ``str`` whose ``encode()`` returns raw bytes (Java and Go clients take raw
bytes directly).

A real node process; records sent with kafka-python: on one partition, valid messages, then poison
records (one due in 2 s, one lapsed, one without Chronos headers), then valid messages again, all
in one consumed batch; a second partition gets a poison record too.

Pass: every valid record fires on time (lost 0, early 0, no duplicate), each poison record reaches
the dead-letter topic with its key and value and a reason naming the headers, the node never
crashed or restarted (same process, no loop died), and a node started afterwards on the same
group does not see the poison records again (their offsets were stored).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from chronos.protocol import (
    DEAD_LETTER_REASON_HEADER,
    DEADLINE_HEADER,
    MESSAGE_ID_HEADER,
    format_deadline,
)
from tests.fault.bounds import ON_TIME_MS
from tests.support import Topics
from tests.support.checker import (
    Observation,
    Outgoing,
    ScenarioResult,
    TopicReader,
    analyse,
    expectations,
    header,
    record_result,
    scheduled,
)
from tests.support.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


Raw = tuple[
    bytes, bytes, list[tuple[str, bytes | None]]
]  # key, value, headers as kafka-python takes them


class RawName(str):
    """A header name kafka-python writes as raw bytes that are not valid UTF-8."""

    raw: bytes = b"\xff\xfe-not-utf8"

    def encode(self, *_args: object, **_kwargs: object) -> bytes:
        return self.raw


def _produce(bootstrap: str, topic: str, records: list[tuple[int, Outgoing | Raw]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=200, acks="all")
    try:
        for partition, record in records:
            if isinstance(record, Outgoing):
                key, value, headers = record.key, record.value, list(record.headers)
            else:
                key, value, headers = record
            producer.send(topic, key=key, value=value, headers=headers, partition=partition)
        producer.flush(30)
    finally:
        producer.close(5)


def _poison(label: str, *, deadline: datetime | None) -> Raw:
    headers: list[tuple[str, bytes | None]] = []
    if deadline is not None:
        headers = [
            (MESSAGE_ID_HEADER, f"poison-{label}".encode()),
            (DEADLINE_HEADER, format_deadline(deadline).encode()),
        ]
    headers.append((RawName("x"), b"value of a header with a bad name"))
    return (f"poison-key-{label}".encode(), f"poison-value-{label}".encode(), headers)


@pytest.mark.parametrize("probe", ["inline", "process"])
def test_a_header_name_that_is_not_utf8_is_quarantined_never_crashes_a_node(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics, probe: str
) -> None:
    """Both ways of probing (``CHRONOS_HEADER_PROBE``): the default reads inline and catches
    the client's failed first read; ``process`` reads in a forked child first."""
    cluster = make_cluster()
    node = cluster.start(env={"PYTHONFAULTHANDLER": "1", "CHRONOS_HEADER_PROBE": probe})
    cluster.wait_ready()
    pid = node.pid

    now = datetime.now(UTC)
    before = [scheduled(now + timedelta(seconds=3), key=None) for _ in range(5)]
    after = [scheduled(now + timedelta(seconds=3), key=None) for _ in range(5)]
    other = [scheduled(now + timedelta(seconds=3), key=None) for _ in range(3)]
    poisons = {
        "future": _poison("future", deadline=now + timedelta(seconds=2)),
        "lapsed": _poison("lapsed", deadline=now - timedelta(seconds=5)),
        "bare": _poison("bare", deadline=None),
        "other": _poison("other", deadline=now + timedelta(seconds=2)),
    }
    batch: list[tuple[int, Outgoing | Raw]] = [(0, m) for m in before]
    batch += [(0, poisons[k]) for k in ("future", "lapsed", "bare")]
    batch += [(0, m) for m in after]
    batch += [(1, poisons["other"])] + [(1, m) for m in other]
    started = time.monotonic()
    _produce(kafka_bootstrap, topics.input, batch)

    valid = before + after + other
    sent = expectations(valid)
    poison_values = {p[1] for p in poisons.values()}
    with TopicReader(kafka_bootstrap, topics.output, topics.dead_letter) as reader:

        def done(observations: list[Observation]) -> bool:
            seen = {o.track for o in observations}
            dead = {o.value for o in observations if o.dead_letter}
            return set(sent) <= seen and poison_values <= dead

        reader.read_until(done, timeout=60, quiet=1.5)
        report = analyse(
            sent, reader.observations, advance_ms=cluster.overrides["timing_advance_ms"]
        )
        dead_letters = {o.value: o for o in reader.observations if o.dead_letter}
    recovery = time.monotonic() - started

    assert node.alive() and node.pid == pid, f"the node crashed ({node.returncode}):\n{node.tail()}"
    assert not node.events("loop_died"), node.tail()
    assert report.lost == [] and report.early == {} and report.duplicated == {}, report.summary()
    # The valid records are due 3 s after they are sent: probing a batch takes far less.
    assert report.late.max <= ON_TIME_MS, report.summary()
    for label, (key, value, _headers) in poisons.items():
        observed = dead_letters.get(value)
        assert observed is not None, f"poison {label} not dead-lettered:\n{node.tail()}"
        assert observed.key == key
        reason = (header(observed.headers, DEAD_LETTER_REASON_HEADER) or b"").decode()
        assert "headers" in reason, reason
    assert node.metric("chronos_quarantined_records_total") == len(poisons)

    # The offsets past the poison records were stored: a new node on the group starts after them.
    assert node.terminate() == 0, node.tail()
    successor = cluster.start(env={"CHRONOS_HEADER_PROBE": probe})
    cluster.wait_ready([successor])
    late = scheduled(datetime.now(UTC) + timedelta(seconds=1), key=None)
    _produce(kafka_bootstrap, topics.input, [(0, late), (1, late)])
    with TopicReader(kafka_bootstrap, topics.output, topics.dead_letter) as reader:
        reader.read_until(lambda obs: late.track in {o.track for o in obs}, timeout=30)
        again = [o for o in reader.observations if o.dead_letter]
    assert len(again) == len(poisons), "a poison record was read again after its offset was stored"
    assert successor.metric("chronos_quarantined_records_total") == 0

    result = ScenarioResult.of(
        "13-poison-headers" + ("" if probe == "inline" else "-process"),
        "header names that are not UTF-8 (they crash the Kafka client) among valid records"
        + ("" if probe == "inline" else ", probed in a forked child"),
        report,
        round(recovery, 1),
        quarantined=len(poisons),
    )
    record_result(result)
