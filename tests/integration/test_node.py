"""Chronos nodes (in-process) against the real Postgres and the real Kafka-protocol broker.

Every test gets a fresh database at the head revision and fresh topics (3 partitions). Records
are produced and read back with a separate client; fire time is the output record's CreateTime.
The rule checked everywhere: a message is never fired before ``deadline - timing advance``
(1 ms allowed for CreateTime's truncation to whole milliseconds), and never twice when no node
fails.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any, cast

import pytest
from confluent_kafka import Message

from chronos.protocol import (
    DEAD_LETTER_REASON_HEADER,
    DEADLINE_HEADER,
    MESSAGE_ID_HEADER,
    format_deadline,
)
from chronos.store import Outcome, PostgresStore
from tests.integration.nodes import (
    ON_TIME_MS,
    TEST_ID,
    Headers,
    Nodes,
    RecordingStore,
    Sent,
    assert_not_early,
    chronos_record,
    fire_ms,
    headers_of,
    java_partition,
    ms,
    now,
    produce,
    read,
    rows,
    tid_of,
)
from tests.support import Topics
from tests.support.polling import eventually

pytestmark = pytest.mark.integration

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
    assert latest <= ms(due) + ON_TIME_MS, f"fired {latest - ms(due)} ms after its deadline"
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
