"""Chronos nodes (in-process) against the real Postgres and the real Kafka-protocol broker.

Every test gets a fresh database at the head revision and fresh topics (3 partitions). Records
are produced and read back with a separate client; fire time is the output record's CreateTime.
The rule checked everywhere: a message is never fired before ``deadline - timing advance``
(1 ms allowed for CreateTime's truncation to whole milliseconds), and never twice when no node
fails.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition
from kafka.partitioner.default import murmur2

from chronos.config.settings import Settings
from chronos.node.supervisor import Node
from chronos.protocol import (
    DEAD_LETTER_REASON_HEADER,
    DEADLINE_HEADER,
    MESSAGE_ID_HEADER,
    format_deadline,
)
from chronos.store import DEFAULT_CANCEL_TTL_MS, ClaimedRow, Outcome, PostgresStore
from tests.support import Topics, consumer_config, make_settings

pytestmark = pytest.mark.integration

Headers = list[tuple[str, bytes | None]]
TEST_ID = "x-test-id"  # an ordinary header: relayed, identifies each record on the output

# -------------------------------------------------------------------------------- helpers


def now() -> datetime:
    return datetime.now(UTC)


def ms(instant: datetime) -> int:
    return round(instant.timestamp() * 1000)


def java_partition(key: bytes, partitions: int) -> int:
    """The partition the Java client's default partitioner picks for a non-null key."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass
class Sent:
    test_id: str
    key: bytes | None
    value: bytes | None
    headers: Headers  # as sent, Chronos headers included
    deadline: datetime | None

    @property
    def relayed_headers(self) -> Headers:
        return [(n, v) for n, v in self.headers if n not in (MESSAGE_ID_HEADER, DEADLINE_HEADER)]


def chronos_record(
    message_id: str,
    deadline: datetime | str,
    *,
    key: bytes | None = b"key",
    value: bytes | None = b"value",
    before: Headers | None = None,
    after: Headers | None = None,
    test_id: str | None = None,
) -> Sent:
    raw = deadline if isinstance(deadline, str) else format_deadline(deadline)
    tid = test_id or message_id
    headers: Headers = [
        *(before or []),
        (MESSAGE_ID_HEADER, message_id.encode()),
        (TEST_ID, tid.encode()),
        (DEADLINE_HEADER, raw.encode()),
        *(after or []),
    ]
    parsed = deadline if isinstance(deadline, datetime) else None
    return Sent(tid, key, value, headers, parsed)


def produce(bootstrap: str, topic: str, records: Sequence[Sent]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for r in records:
        producer.produce(topic, key=r.key, value=r.value, headers=cast(Any, r.headers))
    assert producer.flush(30) == 0


def read(
    bootstrap: str,
    topic: str,
    partitions: int,
    count: int,
    timeout: float = 20.0,
    settle: float = 1.0,
) -> list[Message]:
    """Every record of ``topic`` from the beginning: waits for ``count``, then ``settle`` more
    seconds so that a duplicate would show up."""
    consumer = Consumer({**consumer_config(bootstrap), "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    records: list[Message] = []
    try:
        limit = time.monotonic() + timeout
        settled_at: float | None = None
        while time.monotonic() < limit:
            if len(records) >= count:
                settled_at = settled_at or time.monotonic() + settle
                if time.monotonic() >= settled_at:
                    break
            for m in consumer.consume(500, timeout=0.2):
                if m.error() is None:
                    records.append(m)
    finally:
        consumer.close()
    return records


def headers_of(record: Message) -> Headers:
    """A consumed record's headers: a list of (str, bytes | None) pairs."""
    return cast(Headers, record.headers() or [])


def tid_of(record: Message) -> str:
    for name, value in headers_of(record):
        if name == TEST_ID and value is not None:
            return value.decode()
    raise AssertionError(f"record without {TEST_ID}: {record.headers()}")


def fire_ms(record: Message) -> int:
    _kind, stamp = record.timestamp()
    assert stamp > 0, "the output record has no timestamp"
    return int(stamp)


def assert_not_early(records: Sequence[Message], sent: dict[str, Sent], advance_ms: int) -> None:
    for record in records:
        deadline = sent[tid_of(record)].deadline
        assert deadline is not None
        earliest = ms(deadline) - advance_ms
        assert fire_ms(record) >= earliest - 1, (
            f"{tid_of(record)} fired {earliest - fire_ms(record)} ms before deadline - advance"
        )


ALL_ROWS = "SELECT id, readied_by::text, readied_at FROM chronos_messages ORDER BY id"
CLAIMED_ROWS = (
    "SELECT id, readied_by::text, readied_at FROM chronos_messages"
    " WHERE readied_at IS NOT NULL ORDER BY id"
)


def rows(url: str, claimed_only: bool = False) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(CLAIMED_ROWS if claimed_only else ALL_ROWS).fetchall()


def eventually(condition: Callable[[], bool], timeout: float = 15.0, every: float = 0.05) -> bool:
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        if condition():
            return True
        time.sleep(every)
    return condition()


class RecordingStore:
    """A PostgresStore that remembers what enqueue decided and what was claimed."""

    def __init__(self, url: str) -> None:
        self._store = PostgresStore(url)
        self.outcomes: dict[str, list[Outcome]] = {}
        self.claimed: list[str] = []
        self._lock = threading.Lock()

    def enqueue(
        self, messages: Any, advance_ms: int, cancel_ttl_ms: int = DEFAULT_CANCEL_TTL_MS
    ) -> list[Outcome]:
        result = self._store.enqueue(messages, advance_ms, cancel_ttl_ms)
        with self._lock:
            for m, outcome in zip(messages, result, strict=True):
                self.outcomes.setdefault(m.id, []).append(outcome)
        return result

    def claim(self, *args: Any, **kwargs: Any) -> list[ClaimedRow]:
        result = self._store.claim(*args, **kwargs)
        with self._lock:
            self.claimed.extend(r.id for r in result)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class Nodes:
    """Starts in-process nodes; stops whatever is still running at the end of the test."""

    def __init__(self, database_url: str, bootstrap: str, topics: Topics) -> None:
        self.database_url = database_url
        self.bootstrap = bootstrap
        self.topics = topics
        self.running: list[Node] = []

    def settings(self, **overrides: Any) -> Settings:
        values: dict[str, Any] = {"poll_interval_ms": 50}
        values.update(overrides)
        return make_settings(self.database_url, self.bootstrap, self.topics, **values)

    def start(self, store: Any = None, *, ready: bool = True, **overrides: Any) -> Node:
        """Start a node; with ``ready``, wait until the running nodes share every input
        partition (the group join takes a few seconds), so deadlines can be set from then."""
        node = Node(self.settings(**overrides), store=store)
        node.start()
        self.running.append(node)
        if ready:
            assert eventually(self._assigned, timeout=30), "the input partitions were not assigned"
        return node

    def _assigned(self) -> bool:
        owned = [node.state.loops["intake"][0].assigned for node in self.running]  # type: ignore[attr-defined]
        every = set().union(*owned)
        return (
            all(owned)
            and len(every) == self.topics.partitions
            and sum(map(len, owned)) == len(every)
        )

    def stop(self, node: Node, timeout: float = 20.0) -> int:
        result: list[int] = []
        node.request_stop()
        waiter = threading.Thread(target=lambda: result.append(node.wait()))
        waiter.start()
        waiter.join(timeout)
        self.running.remove(node)
        assert result, "the node did not stop within the timeout"
        return result[0]

    def stop_all(self) -> None:
        for node in list(self.running):
            self.stop(node)


@pytest.fixture
def nodes(migrated_database_url: str, kafka_bootstrap: str, topics: Topics) -> Iterator[Nodes]:
    started = Nodes(migrated_database_url, kafka_bootstrap, topics)
    yield started
    started.stop_all()


# -------------------------------------------------------------------------------- tests


def test_round_trip_is_byte_exact_on_time_and_on_the_java_partition(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    advance = 50
    nodes.start(timing_advance_ms=advance)
    due = now() + timedelta(seconds=2)
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
        chronos_record("null-key", due, key=None, value=b"\x00"),
        chronos_record("tombstone", due, key=b"gone", value=None),
        chronos_record("empty", due, key=b"", value=b""),
        # The same instant, written with different offsets: converted to UTC.
        chronos_record("utc-no-offset", due.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3], key=b"o1"),
        chronos_record(
            "plus-two",
            due.astimezone(timezone_hours(2)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "+02:00",
            key=b"o2",
        ),
        chronos_record(
            "minus-five-thirty",
            due.astimezone(timezone_hours(-5.5)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "-05:30",
            key=b"o3",
        ),
    ]
    sent += [chronos_record(f"same-key-{i}", due, key=f"k{i % 5}".encode()) for i in range(15)]
    for s in sent:
        s.deadline = due.replace(microsecond=due.microsecond // 1000 * 1000)
    produce(kafka_bootstrap, topics.input, sent)
    by_id = {s.test_id: s for s in sent}

    out = read(kafka_bootstrap, topics.output, topics.partitions, len(sent))

    counts = Counter(tid_of(r) for r in out)
    assert counts == Counter(list(by_id)), "each message exactly once"
    for record in out:
        s = by_id[tid_of(record)]
        assert record.key() == s.key
        assert record.value() == s.value  # a tombstone stays null
        assert (record.headers() or []) == s.relayed_headers  # order, repeats and None kept
        if s.key is not None:
            assert record.partition() == java_partition(s.key, topics.partitions), s.test_id
    assert_not_early(out, by_id, advance)
    latest = max(fire_ms(r) for r in out)
    assert latest <= ms(due) + 5000, "fired, but very late"
    assert eventually(lambda: rows(nodes.database_url) == [])


def timezone_hours(hours: float) -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=hours))


def test_timing_advance_fires_early_by_at_most_the_advance(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    advance = 400
    nodes.start(timing_advance_ms=advance, lookahead_ms=1000)
    start = now() + timedelta(seconds=2)
    sent = [
        chronos_record(f"t{i}", start + timedelta(milliseconds=37 * i), key=f"t{i}".encode())
        for i in range(20)
    ]
    for s in sent:
        assert s.deadline is not None
        s.deadline = s.deadline.replace(microsecond=s.deadline.microsecond // 1000 * 1000)
    produce(kafka_bootstrap, topics.input, sent)
    by_id = {s.test_id: s for s in sent}

    out = read(kafka_bootstrap, topics.output, topics.partitions, len(sent))

    assert Counter(tid_of(r) for r in out) == Counter(list(by_id))
    assert_not_early(out, by_id, advance)
    # The advance is used: fired ahead of the deadline (the timers aim at deadline - 400 ms).
    early = [r for r in out if fire_ms(r) < ms(by_id[tid_of(r)].deadline or now())]
    assert len(early) >= len(out) // 2, "the timing advance is not applied"


def test_fast_path_publishes_a_lapsed_deadline_directly_without_storing_it(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    store = RecordingStore(nodes.database_url)
    advance = 500
    nodes.start(store=store, timing_advance_ms=advance)
    past = now() - timedelta(hours=1)
    sent = [
        chronos_record("past", past, key=b"p", value=b"\x01", after=[("h", None)]),
        chronos_record("far-past", "1999-12-31T23:59:59.999Z", key=None, value=None),
        # Within the timing advance: lapsed too.
        chronos_record("within-advance", now() + timedelta(milliseconds=100), key=b"w"),
    ]
    sent += [chronos_record(f"k{i}", past, key=f"key-{i}".encode()) for i in range(10)]
    produce(kafka_bootstrap, topics.input, sent)
    by_id = {s.test_id: s for s in sent}

    out = read(kafka_bootstrap, topics.output, topics.partitions, len(sent))

    assert Counter(tid_of(r) for r in out) == Counter(list(by_id))
    for record in out:
        s = by_id[tid_of(record)]
        assert (record.key(), record.value()) == (s.key, s.value)
        assert (record.headers() or []) == s.relayed_headers
        if s.key is not None:
            assert record.partition() == java_partition(s.key, topics.partitions)
    for s in sent:
        assert store.outcomes[s.test_id] == [Outcome.FIRE_NOW], s.test_id
    assert store.claimed == []  # never stored, so never claimed
    assert rows(nodes.database_url) == []


def test_a_duplicate_id_is_ignored_until_the_message_has_fired(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    nodes.start()
    due = now() + timedelta(seconds=2)
    first = chronos_record("dup", due, value=b"first", test_id="first")
    produce(kafka_bootstrap, topics.input, [first])
    assert eventually(lambda: [r[0] for r in rows(nodes.database_url)] == ["dup"])
    produce(
        kafka_bootstrap,
        topics.input,
        [
            chronos_record("dup", due + timedelta(seconds=1), value=b"second", test_id="second"),
            chronos_record("dup", now() - timedelta(seconds=5), value=b"lapsed", test_id="lapsed"),
        ],
    )
    out = read(kafka_bootstrap, topics.output, topics.partitions, 1, settle=2.0)
    assert [(tid_of(r), r.value()) for r in out] == [("first", b"first")]
    # Fired, hence forgotten: the same id is scheduled again.
    again = chronos_record(
        "dup", now() + timedelta(milliseconds=500), value=b"again", test_id="again"
    )
    produce(kafka_bootstrap, topics.input, [again])
    out = read(kafka_bootstrap, topics.output, topics.partitions, 2)
    assert [tid_of(r) for r in sorted(out, key=fire_ms)] == ["first", "again"]


def test_bad_input_goes_to_the_dead_letter_topic_with_the_reason(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    nodes.start()
    later = format_deadline(now() + timedelta(seconds=1)).encode()

    def bad(
        tid: str, headers: Headers, key: bytes | None = b"k", value: bytes | None = b"v"
    ) -> Sent:
        return Sent(tid, key, value, [(TEST_ID, tid.encode()), *headers], None)

    cases = {
        "missing-id": (
            bad("missing-id", [(DEADLINE_HEADER, later)]),
            "missing header chronosMessageId",
        ),
        "missing-deadline": (
            bad("missing-deadline", [(MESSAGE_ID_HEADER, b"m1"), ("x", None)], key=None),
            "missing header chronosDeadline",
        ),
        "no-headers": (Sent("no-headers", b"k", b"v", [], None), "missing header chronosMessageId"),
        "long-id": (
            bad("long-id", [(MESSAGE_ID_HEADER, b"i" * 129), (DEADLINE_HEADER, later)], value=None),
            "129 characters long",
        ),
        "unparseable": (
            bad("unparseable", [(MESSAGE_ID_HEADER, b"m2"), (DEADLINE_HEADER, b"in 5 minutes")]),
            "not ISO-8601",
        ),
        "impossible": (
            bad(
                "impossible",
                [(MESSAGE_ID_HEADER, b"m3"), (DEADLINE_HEADER, b"2023-02-29T10:00:00.000Z")],
            ),
            "not a valid instant",
        ),
        "binary-id": (
            bad(
                "binary-id",
                [(MESSAGE_ID_HEADER, b"\xff\xfe"), (DEADLINE_HEADER, later)],
                key=b"\x00\xff",
                value=b"\xff\x00",
            ),
            "not valid UTF-8",
        ),
    }
    good = chronos_record("good", now() + timedelta(milliseconds=500))
    produce(kafka_bootstrap, topics.input, [c for c, _ in cases.values()] + [good])

    dead = read(kafka_bootstrap, topics.dead_letter, topics.partitions, len(cases))
    out = read(kafka_bootstrap, topics.output, topics.partitions, 1, settle=0.5)

    assert [tid_of(r) for r in out] == ["good"]
    got: dict[str, Message] = {}
    for record in dead:
        headers = headers_of(record)
        tid = next((v.decode() for n, v in headers if n == TEST_ID and v), "no-headers")
        assert tid not in got, f"{tid} dead-lettered twice"
        got[tid] = record
    assert set(got) == set(cases)
    for tid, (original, reason) in cases.items():
        record = got[tid]
        assert record.key() == original.key
        assert record.value() == original.value
        headers = headers_of(record)
        assert headers[: len(original.headers)] == original.headers  # originals, in order
        reasons = [v for n, v in headers if n == DEAD_LETTER_REASON_HEADER]
        assert len(reasons) == 1 and reasons[0] is not None
        assert reason in reasons[0].decode(), (tid, reasons[0])
    assert rows(nodes.database_url) == []


def test_two_nodes_share_a_burst_without_duplicates_or_early_fire(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    advance = 100
    stores = [RecordingStore(nodes.database_url) for _ in range(2)]
    for index, store in enumerate(stores):  # both join the group, then wait for the assignment
        nodes.start(store=store, ready=index == 1, timing_advance_ms=advance, lookahead_ms=300)
    start = now() + timedelta(seconds=2.5)
    sent = [
        chronos_record(
            f"b{i:04d}", start + timedelta(milliseconds=4 * i), key=f"b{i % 37}".encode()
        )
        for i in range(400)
    ]
    for s in sent:
        assert s.deadline is not None
        s.deadline = s.deadline.replace(microsecond=s.deadline.microsecond // 1000 * 1000)
    produce(kafka_bootstrap, topics.input, sent)
    by_id = {s.test_id: s for s in sent}

    out = read(kafka_bootstrap, topics.output, topics.partitions, len(sent), timeout=30, settle=1.5)

    counts = Counter(tid_of(r) for r in out)
    duplicates = {k: v for k, v in counts.items() if v > 1}
    assert not duplicates, f"fired more than once: {sorted(duplicates)[:10]}"
    assert set(counts) == set(by_id)
    assert_not_early(out, by_id, advance)
    claimed = [set(s.claimed) for s in stores]
    assert claimed[0].isdisjoint(claimed[1])
    assert all(claimed), "one node did no firing: the burst was not shared"
    assert eventually(lambda: rows(nodes.database_url) == [])


def test_rows_claimed_by_a_dead_node_are_reset_after_the_hold_time_and_fire_once(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics, caplog: pytest.LogCaptureFixture
) -> None:
    hold = 3000
    url = nodes.database_url
    dead = PostgresStore(url)
    dead_id = str(uuid.uuid4())
    due = now() + timedelta(milliseconds=300)
    sent = [chronos_record(f"d{i}", due, key=f"d{i}".encode()) for i in range(5)]
    from chronos.protocol import ScheduledMessage

    dead.enqueue(
        [ScheduledMessage(s.test_id, due, s.key, s.value, s.relayed_headers) for s in sent], 0
    )
    claimed = dead.claim(dead_id, 5000, 100, 10)  # ...and then the node "dies"
    dead.close()
    assert len(claimed) == len(sent)
    readied_ms = max(ms(r.readied_at) for r in claimed)

    with caplog.at_level(logging.WARNING, logger="chronos.cluster.recovery"):
        nodes.start(
            ready=False,
            hold_time_ms=hold,
            lookahead_ms=500,
            delivery_timeout_ms=1000,
            poll_interval_ms=100,
            failure_detection_interval_ms=200,
        )
        out = read(kafka_bootstrap, topics.output, topics.partitions, len(sent), settle=2.0)

    assert Counter(tid_of(r) for r in out) == Counter(s.test_id for s in sent)
    for record in out:
        # Not before the dead node's claim outlived the hold time.
        assert fire_ms(record) >= readied_ms + hold - 1
        assert fire_ms(record) <= readied_ms + hold + 5000
    suspected = [r for r in caplog.records if getattr(r, "event", None) == "suspected_failure"]
    assert {getattr(r, "node", None) for r in suspected} == {dead_id}
    assert len(suspected) == len(sent)
    assert eventually(lambda: rows(url) == [])


def test_graceful_stop_gives_back_every_claim_and_another_node_fires_them(
    nodes: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    url = nodes.database_url
    config = {
        "lookahead_ms": 4000,
        "hold_time_ms": 6000,
        "delivery_timeout_ms": 1000,
        "timing_advance_ms": 50,
    }
    first = nodes.start(**cast(dict[str, Any], config))
    due = now() + timedelta(seconds=3)
    sent = [chronos_record(f"g{i}", due, key=f"g{i}".encode()) for i in range(20)]
    for s in sent:
        s.deadline = due.replace(microsecond=due.microsecond // 1000 * 1000)
    produce(kafka_bootstrap, topics.input, sent)
    assert eventually(lambda: len(rows(url, claimed_only=True)) == len(sent))  # held on timers

    assert nodes.stop(first) == 0

    assert len(rows(url)) == len(sent)
    assert rows(url, claimed_only=True) == []  # no claimed rows left behind
    nodes.start(ready=False, **config)
    out = read(kafka_bootstrap, topics.output, topics.partitions, len(sent), settle=1.5)
    assert Counter(tid_of(r) for r in out) == Counter(s.test_id for s in sent)
    assert_not_early(out, {s.test_id: s for s in sent}, 50)
    assert eventually(lambda: rows(url) == [])
