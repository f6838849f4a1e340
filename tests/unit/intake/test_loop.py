"""Consume-and-enqueue against the in-memory store, the fake publisher and the fake consumer."""

from __future__ import annotations

import threading
import time
from typing import cast

from confluent_kafka import Consumer, KafkaError

from chronos.intake.settlement import REFUSED_RETRY_S
from chronos.protocol import (
    DEAD_LETTER_CODE_HEADER,
    DEAD_LETTER_REASON_HEADER,
    DEAD_LETTER_SOURCE_HEADER,
    DEADLINE_HEADER,
    MESSAGE_ID_HEADER,
)
from chronos.testing import make_record
from tests.unit.helpers import DEAD_LETTER, INPUT, OUTPUT
from tests.unit.intake.helpers import Intake, wait_for


def test_future_message_is_stored_and_its_offset_stored_after() -> None:
    t = Intake()
    assert t.process(t.record("a", 5000, key=b"\x00", value=None, extra=[("x", None)]))
    row = t.store.get("a")
    assert row is not None
    assert (row.key, row.value, row.headers) == (b"\x00", None, [("x", None)])
    assert t.publisher.records == []
    assert t.consumer.stored == {(INPUT, 0): 2}  # the next offset to read


def test_lapsed_message_is_published_directly_and_not_stored() -> None:
    t = Intake(timing_advance_ms=50)
    extra = [("h", b"1"), ("h", None), ("e", b"")]
    assert t.process(t.record("late", -1000, key=None, value=b"\xff", extra=extra))
    assert "late" not in t.store
    (record,) = t.publisher.records
    assert record.topic == OUTPUT
    assert (record.key, record.value, record.headers) == (None, b"\xff", extra)
    within_advance = t.record("soon", 40)
    assert t.process(within_advance)
    assert len(t.publisher.records) == 2
    assert "soon" not in t.store


def test_duplicate_ids_are_ignored_within_and_across_batches() -> None:
    t = Intake()
    assert t.process(t.record("d", 5000, value=b"1"), t.record("d", 6000, value=b"2"))
    assert t.process(t.record("d", 7000, value=b"3"), t.record("d", -10, value=b"4"))
    row = t.store.get("d")
    assert row is not None and row.value == b"1"
    assert t.publisher.records == []  # the lapsed duplicate was not published either
    assert t.consumer.stored == {(INPUT, 0): 5}


def test_bad_records_go_to_the_dead_letter_topic_with_the_reason() -> None:
    t = Intake()
    long_id = "x" * 129
    bad = {
        "missing id": t.record(None, None, extra=[(DEADLINE_HEADER, b"2030-01-01T00:00:00Z")]),
        "missing deadline": t.record(None, None, extra=[(MESSAGE_ID_HEADER, b"m1")]),
        "over-long id": t.record(long_id, 5000),
        "unparseable": t.record(
            None, None, extra=[(MESSAGE_ID_HEADER, b"m2"), (DEADLINE_HEADER, b"soon")]
        ),
        "impossible": t.record(
            None,
            None,
            key=None,
            value=None,
            extra=[(MESSAGE_ID_HEADER, b"m3"), (DEADLINE_HEADER, b"2023-02-29T00:00:00.000Z")],
        ),
    }
    good = t.record("ok", 5000)
    assert t.process(*bad.values(), good)
    assert "ok" in t.store
    dead = t.publisher.produced(DEAD_LETTER)
    assert len(dead) == len(bad)
    expected_reasons = [
        b"missing header chronosMessageId",
        b"missing header chronosDeadline",
        b"129 characters long",
        b"is not ISO-8601",
        b"not a valid instant",
    ]
    expected_codes = [b"missing_id", b"missing_deadline", b"invalid_id"]
    expected_codes += [b"invalid_deadline", b"invalid_deadline"]
    for record, original, reason, code in zip(
        dead, bad.values(), expected_reasons, expected_codes, strict=True
    ):
        assert record.key == original.key()
        assert record.value == original.value()
        assert record.headers[:-3] == (original.headers() or [])  # all originals, in order
        (rname, rvalue), (sname, svalue), (cname, cvalue) = record.headers[-3:]
        assert rname == DEAD_LETTER_REASON_HEADER
        assert rvalue is not None and reason in rvalue
        assert sname == DEAD_LETTER_SOURCE_HEADER
        assert svalue == f"{INPUT}/0/{original.offset()}".encode()
        assert (cname, cvalue) == (DEAD_LETTER_CODE_HEADER, code)
    assert t.consumer.stored == {(INPUT, 0): good.offset() + 1}


def test_an_impossible_utc_offset_is_dead_lettered_not_scheduled() -> None:
    """ "+05:75" is no offset at all; it must not be read as 6 h 15 min."""
    t = Intake()
    headers: list[tuple[str, bytes | None]] = [
        (MESSAGE_ID_HEADER, b"tz"),
        (DEADLINE_HEADER, b"2031-01-01T00:00:00.000+05:75"),
    ]
    assert t.process(t.record(None, None, extra=headers))
    assert "tz" not in t.store
    assert len(t.publisher.produced(DEAD_LETTER)) == 1


def test_without_a_dead_letter_topic_bad_records_are_dropped_and_skipped() -> None:
    t = Intake(dead_letter_topic="")
    assert t.process(t.record(None, None, extra=[("a", b"b")]))
    assert t.publisher.records == []
    assert t.consumer.stored == {(INPUT, 0): 2}


def test_deadlines_beyond_the_max_delay_are_dead_lettered() -> None:
    t = Intake(max_delay_ms=60_000)
    assert t.process(t.record("far", 60_001), t.record("near", 59_000))
    (dead,) = t.publisher.produced(DEAD_LETTER)
    assert dict(dead.headers)[DEAD_LETTER_REASON_HEADER] is not None
    assert "near" in t.store and "far" not in t.store


def test_offsets_are_stored_only_once_every_publish_is_confirmed() -> None:
    t = Intake(auto=False)
    done: list[bool] = []
    worker = threading.Thread(target=lambda: done.append(t.process(t.record("late", -5))))
    worker.start()
    limit = time.monotonic() + 5
    while not t.publisher.pending() and time.monotonic() < limit:
        time.sleep(0.005)
    time.sleep(0.05)
    assert t.consumer.stored == {}  # produced, not confirmed
    t.publisher.deliver()
    worker.join(5)
    assert done == [True]
    assert t.consumer.stored == {(INPUT, 0): 2}


def test_failed_direct_publishes_are_retried_before_offsets_move() -> None:
    t = Intake()
    t.publisher.fail_next(2, KafkaError._TRANSPORT)
    assert t.process(t.record("late", -5))
    assert [r.status for r in t.publisher.records] == ["failed", "failed", "delivered"]
    assert t.consumer.stored == {(INPUT, 0): 2}


def test_a_lapsed_record_the_output_topic_refuses_for_good_does_not_stall_intake() -> None:
    """A broker refusal that retrying cannot fix (record too large for the output topic) must
    end like it does on the firing path (dead-lettered after max_publish_attempts), not be
    retried for ever while every later record of the partition waits."""
    t = Intake(max_publish_attempts=3)
    t.publisher.decide = lambda r: (
        KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if r.topic == OUTPUT else None
    )
    done: list[bool] = []
    worker = threading.Thread(target=lambda: done.append(t.process(t.record("big", -5))))
    worker.start()
    worker.join(4)  # a few 50 ms back-offs at most when it gives up
    if worker.is_alive():
        t.loop.stop()  # unblock the retry loop so the test can end
        worker.join(10)
    attempts = len(t.publisher.produced(OUTPUT))
    assert done == [True], f"intake still retrying after {attempts} refused publishes"
    (dead,) = t.publisher.delivered(DEAD_LETTER)
    assert dict(dead.headers)[DEAD_LETTER_CODE_HEADER] == b"publish_failed"
    assert t.consumer.stored == {(INPUT, 0): 2}


def test_a_refused_record_goes_again_at_once_however_often_it_is_refused() -> None:
    """At the shipped max_publish_attempts a lapsed record too large for the output topic and for
    the dead-letter topic is refused ten times before its reduced dead letter goes through: each
    time it goes again after the back-off's first step, never after a doubled one (the doubling
    held the partition 12 s on the real broker: scenario 11). An outage still backs off."""
    t = Intake()
    attempts = t.loop.settings.max_publish_attempts
    t.publisher.decide = lambda r: (
        KafkaError(KafkaError.MSG_SIZE_TOO_LARGE)
        if r.topic == OUTPUT or (r.topic == DEAD_LETTER and r.value is not None)
        else None
    )
    waits = _recorded_waits(t)
    assert t.process(t.record("big", -5))
    assert len(t.publisher.produced(OUTPUT)) == attempts
    assert len(t.publisher.produced(DEAD_LETTER)) == attempts + 1  # then the reduced one
    assert len(waits) == 2 * attempts and max(waits) == REFUSED_RETRY_S, waits
    (reduced,) = t.publisher.delivered(DEAD_LETTER)
    assert reduced.value is None and t.consumer.stored == {(INPUT, 0): 2}


def test_an_outage_backs_off() -> None:
    t = Intake()
    t.publisher.fail_next(4, KafkaError._TRANSPORT)
    waits = _recorded_waits(t)
    assert t.process(t.record("late", -5))
    assert len(waits) == 4 and waits[-1] > REFUSED_RETRY_S, waits  # 0.4-0.8 s by the fourth


def _recorded_waits(t: Intake) -> list[float]:
    """The pauses the intake's settlement asks for, recorded as it waits them."""
    waits: list[float] = []
    wait = t.loop.settlement.wait

    def recorded(seconds: float) -> bool:
        waits.append(seconds)
        return wait(seconds)

    t.loop.settlement.wait = recorded
    return waits


def test_database_errors_are_retried() -> None:
    t = Intake()
    t.store.fail_next(2, "enqueue_batch")
    assert t.process(t.record("r", 5000))
    assert "r" in t.store


def test_stopping_during_an_outage_leaves_the_batch_to_be_replayed() -> None:
    t = Intake()
    t.store.fail_next(1000, "enqueue_batch")
    threading.Timer(0.2, t.loop.stop).start()
    assert t.process(t.record("s", 5000)) is False
    assert t.consumer.stored == {}


def test_consumer_errors_are_skipped() -> None:
    t = Intake()
    eof = make_record(INPUT, 0, 99, None, None, error=KafkaError(KafkaError._PARTITION_EOF))
    assert t.process(eof, t.record("e", 5000))
    assert "e" in t.store


def test_offsets_are_tracked_per_partition() -> None:
    t = Intake()
    assert t.process(t.record("p0", 5000, partition=0), t.record("p1", 5000, partition=1))
    assert t.consumer.stored == {(INPUT, 0): 2, (INPUT, 1): 3}


def test_the_loop_consumes_until_stopped_and_commits_at_the_end() -> None:
    t = Intake()
    t.consumer.feed([t.record("l1", 5000), t.record("l2", -1)])
    thread = threading.Thread(target=t.loop.run)
    thread.start()
    limit = time.monotonic() + 5
    while t.consumer.stored.get((INPUT, 0)) != 3 and time.monotonic() < limit:
        time.sleep(0.01)
    t.loop.stop()
    thread.join(5)
    assert not thread.is_alive()
    assert t.consumer.subscribed == [INPUT]
    assert t.consumer.committed == {(INPUT, 0): 3}
    assert t.consumer.closed
    assert "l1" in t.store
    assert len(t.publisher.delivered(OUTPUT)) == 1


def test_a_dead_letter_topic_that_refuses_writes_parks_the_record_after_the_timeout() -> None:
    """No write access to the dead-letter topic (or it was deleted): the dead letter fails with
    an error retrying does not fix. Intake retries it for dead_letter_timeout_ms, then parks the
    record — counted, logged with its topic/partition/offset — and the partition moves on."""
    t = Intake(dead_letter_timeout_ms=300)
    t.publisher.decide = lambda r: (
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED) if r.topic == DEAD_LETTER else None
    )
    parked_before = _parked()
    done: list[bool] = []
    bad = t.record(None, None, extra=[("no", b"chronos headers")])
    good = t.record("next", 5000)
    worker = threading.Thread(target=lambda: done.append(t.process(bad, good)))
    worker.start()
    worker.join(5)  # 300 ms of retries, a few 50 ms-5 s back-offs
    if worker.is_alive():
        t.loop.stop()  # unblock the retry loop so the test can end
        worker.join(10)
    assert done == [True], "intake still retrying a dead letter the broker refuses"
    assert len(t.publisher.produced(DEAD_LETTER)) >= 2  # it was retried before parking
    assert t.publisher.delivered(DEAD_LETTER) == []
    assert _parked() - parked_before == 1
    assert "next" in t.store
    assert t.consumer.stored == {(INPUT, 0): 3}


def test_a_dead_letter_outage_shorter_than_the_timeout_is_retried_not_parked() -> None:
    t = Intake(dead_letter_timeout_ms=60_000)
    t.publisher.fail_next(3, KafkaError._TRANSPORT)
    parked_before = _parked()
    assert t.process(t.record(None, None, extra=[("no", b"chronos headers")]))
    assert len(t.publisher.delivered(DEAD_LETTER)) == 1
    assert _parked() == parked_before
    assert t.consumer.stored == {(INPUT, 0): 2}


def _parked() -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("chronos_parked_input_records_total") or 0.0


def test_the_assigned_partitions_are_exposed_one_series_each() -> None:
    from confluent_kafka import TopicPartition
    from prometheus_client import REGISTRY

    def held() -> set[tuple[str, str]]:
        return {
            (s.labels["topic"], s.labels["partition"])
            for family in REGISTRY.collect()
            if family.name == "chronos_assigned_partition"
            for s in family.samples
            if s.value == 1
        }

    t = Intake()
    consumer = cast(Consumer, t.consumer)
    t.loop._on_assign(consumer, [TopicPartition(INPUT, 0), TopicPartition(INPUT, 3)])
    assert {(INPUT, "0"), (INPUT, "3")} <= held()
    t.loop._on_revoke(consumer, [TopicPartition(INPUT, 0)])
    t.loop._on_revoke(consumer, [TopicPartition(INPUT, 7)])  # never held: no error
    assert (INPUT, "0") not in held() and (INPUT, "3") in held()
    t.loop._on_revoke(consumer, [TopicPartition(INPUT, 3)])
    assert (INPUT, "3") not in held()


def test_the_loop_consumes_on_while_a_direct_publish_is_unconfirmed() -> None:
    """A late message's publish is confirmed while the next batches are consumed and enqueued:
    waiting for the broker's report before consuming on slowed intake down exactly when its
    input was late. The offsets still move only once the publish is confirmed, in order."""
    t = Intake(auto=False, consume_batch_size=1)
    t.consumer.feed([t.record("late", -5), t.record("after-1", 5000), t.record("after-2", 5000)])
    thread = threading.Thread(target=t.loop.run)
    thread.start()
    try:
        assert wait_for(lambda: "after-2" in t.store), "intake waited for the publish"
        assert len(t.publisher.pending()) == 1
        time.sleep(0.05)
        assert t.consumer.stored == {}  # the later batches' offsets wait for the first one's
        t.publisher.deliver()
        assert wait_for(lambda: t.consumer.stored == {(INPUT, 0): 4})
    finally:
        t.loop.stop()
        thread.join(5)
    assert t.consumer.committed == {(INPUT, 0): 4}


def test_stopping_with_an_unconfirmed_publish_leaves_its_batch_to_be_replayed() -> None:
    t = Intake(auto=False, consume_batch_size=1)
    t.consumer.feed([t.record("late", -5), t.record("after", 5000)])
    thread = threading.Thread(target=t.loop.run)
    thread.start()
    assert wait_for(lambda: "after" in t.store)
    t.loop.stop()
    t.publisher.fail()
    thread.join(10)
    assert not thread.is_alive()
    assert t.consumer.stored == {}
    assert t.consumer.committed == {}


def test_a_rebalance_stores_the_confirmed_offsets_before_the_partitions_go() -> None:
    t = Intake(auto=False, consume_batch_size=1)
    assert t.loop.submit(cast(Consumer, t.consumer), [t.record("late", -5)])
    assert t.consumer.stored == {}
    t.publisher.deliver()
    t.loop._on_revoke(cast(Consumer, t.consumer), [])
    assert t.consumer.stored == {(INPUT, 0): 2}


def test_a_partition_given_back_resumes_after_what_was_made_durable() -> None:
    """The group coordinator's broker died: the assignment was lost and every commit since
    failed. Given the partition back, intake resumes after what it made durable, not at the
    stale commit (replaying would fire again what had fired meanwhile)."""
    from confluent_kafka import TopicPartition

    t = Intake(consume_batch_size=2)
    consumer = cast(Consumer, t.consumer)
    t.consumer.committed[(INPUT, 0)] = 1  # committed before the coordinator went away
    assert t.loop.submit(consumer, [t.record("a", 5000), t.record("b", 5000)])
    assert t.consumer.stored == {(INPUT, 0): 3}
    t.loop._on_lost(consumer, [TopicPartition(INPUT, 0)])  # lost: nothing more committed
    t.loop._on_assign(consumer, [TopicPartition(INPUT, 0), TopicPartition(INPUT, 1)])
    assert t.consumer.assigned == [(INPUT, 0, 3), (INPUT, 1, -1001)]


def test_a_partition_whose_commit_is_ahead_resumes_at_the_commit() -> None:
    from confluent_kafka import TopicPartition

    t = Intake(consume_batch_size=2)
    consumer = cast(Consumer, t.consumer)
    assert t.loop.submit(consumer, [t.record("a", 5000), t.record("b", 5000)])
    t.consumer.committed[(INPUT, 0)] = 9  # another node went on meanwhile
    t.loop._on_assign(consumer, [TopicPartition(INPUT, 0)])
    assert t.consumer.assigned == []  # the client resumes at the commit


def test_a_high_watermark_below_the_position_moves_nothing() -> None:
    """A partition's new leader reports a high watermark below the old leader's until its
    followers' next fetch: the consumer's statistics then show the log ending before the fetch
    position. Nothing is read again (a rewind re-stored every message of the partition that had
    fired: copies); a log that really ends there answers the fetch with "out of range" and the
    consumer resets itself."""
    import json

    from confluent_kafka import TopicPartition

    t = Intake()
    t.consumer.rebalance([TopicPartition(INPUT, 0)])
    t.consumer.feed([t.record("w1", 5000), t.record("w2", 5000)])
    thread = threading.Thread(target=t.loop.run)
    thread.start()
    try:
        assert wait_for(lambda: t.consumer.stored.get((INPUT, 0)) == 3)
        stats = {
            "type": "consumer",
            "topics": {INPUT: {"partitions": {"0": {"hi_offset": 1, "next_offset": 3}}}},
        }
        t.loop._on_stats(json.dumps(stats))
        time.sleep(0.3)  # iterations of the loop
    finally:
        t.loop.stop()
        thread.join(5)
    assert t.consumer.seeks == []
    assert t.consumer.committed == {(INPUT, 0): 3}
