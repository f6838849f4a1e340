"""The firing loop writes each fired message's history in the statement that deletes it: fired to
its topic, partition and offset, how late, by this node; expired and dead-lettered with their
reason code; a series' occurrences within their bound; nothing when the history is off. A
missing day of the history never stops the delete."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import KafkaError

from chronos.firing.dispatcher import Timer
from chronos.firing.history import endings
from chronos.protocol import ScheduledMessage
from chronos.recurrence import Rule
from chronos.store import ClaimedRow, Ending
from chronos.store.history import (
    DEAD_LETTERED,
    EXPIRED,
    FIRED,
    SERIES_RECORDS_PER_TTL,
    record_occurrence,
)
from tests.support.store_contract import msg
from tests.unit.helpers import DEAD_LETTER, OUTPUT, Firing, settings

WEEK = timedelta(days=7)


def _firing(**overrides: Any) -> Firing:
    f = Firing.create(**overrides)
    f.store.maintain_history(f.settings.history_ttl or WEEK)
    return f


def test_a_fired_message_is_recorded_with_its_offset_lateness_and_node() -> None:
    f = _firing()
    f.store.enqueue([msg("other", f.at(500)), msg("m", f.at(1_000))], 0)
    f.run_for(1_100, step_ms=10)
    assert len(f.store) == 0
    (record,) = f.store.ended_messages("m")
    assert (record.outcome, record.topic, record.partition) == (FIRED, OUTPUT, 0)
    assert record.offset == 1  # the second record produced to the output topic
    assert record.node == f.settings.node_id and record.attempt == 1
    # Produced on the database clock's time line, the timing advance (50 ms) ahead at most.
    assert record.lateness_ms is not None and -60 <= record.lateness_ms <= 10
    assert record.deadline == f.clock.now() - timedelta(milliseconds=100)


def test_a_message_fired_twice_keeps_both_fires() -> None:
    f = _firing()
    for _ in range(2):  # at least once: the same id scheduled and fired again
        f.store.enqueue([msg("twice", f.at(100))], 0)
        f.run_for(200, step_ms=10)
    assert [r.offset for r in f.store.ended_messages("twice")] == [1, 0]


def test_expired_and_dropped_messages_are_recorded_with_their_reason() -> None:
    f = _firing(max_lateness_ms=1_000)
    f.store.enqueue([msg("stale", f.at(100))], 0)
    f.clock.advance(5_100)
    f.run_for(100, step_ms=10)
    (record,) = f.store.ended_messages("stale")
    assert (record.outcome, record.topic, record.reason) == (EXPIRED, DEAD_LETTER, "expired")
    assert record.lateness_ms is not None and record.lateness_ms >= 5_000

    dropping = _firing(max_lateness_ms=1_000, expired_action="drop")
    dropping.store.enqueue([msg("dropped", dropping.at(100))], 0)
    dropping.clock.advance(5_100)
    dropping.run_for(100, step_ms=10)
    (dropped,) = dropping.store.ended_messages("dropped")
    assert (dropped.outcome, dropped.topic, dropped.offset) == (EXPIRED, None, None)


def test_a_message_refused_too_often_is_recorded_dead_lettered() -> None:
    f = _firing(max_publish_attempts=2)
    f.publisher.decide = lambda r: (  # every publish to the output topic is refused for good
        KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if r.topic == OUTPUT else None
    )
    f.store.enqueue([msg("refused", f.at(100))], 0)
    f.run_for(3_000, step_ms=10)
    (record,) = f.store.ended_messages("refused")
    assert (record.outcome, record.topic, record.reason) == (
        DEAD_LETTERED,
        DEAD_LETTER,
        "publish_failed",
    )
    assert record.attempt == 3  # after two refused publishes


def test_history_off_writes_nothing_and_fires_as_before() -> None:
    f = _firing(history_ttl=timedelta(0))
    f.store.enqueue([msg("m", f.at(100))], 0)
    f.run_for(200, step_ms=10)
    assert [r.topic for r in f.publisher.records] == [OUTPUT]
    assert f.store.ended_messages("m") == []


def test_no_partition_for_the_day_never_stops_the_delete() -> None:
    f = Firing.create()  # the leader never created the history's days
    f.store.enqueue([msg("m", f.at(100))], 0)
    f.run_for(200, step_ms=10)
    assert len(f.store) == 0 and f.store.ended_messages("m") == []
    assert f.store.unrecorded == 1


def test_a_series_records_its_occurrences_within_the_bound() -> None:
    f = _firing(history_ttl=timedelta(seconds=1000))  # a bucket of 1 s: one record a second at most
    rule = Rule(every_ms=250).encode()
    start = f.at(100)
    f.store.enqueue([ScheduledMessage("s", start, b"k", b"v", [], recurrence=rule)], 0)
    f.run_for(2_000, step_ms=10)
    fired = [r for r in f.publisher.records if r.topic == OUTPUT]
    records = f.store.ended_messages("s", limit=100)
    assert len(fired) >= 7
    assert 1 <= len(records) <= 3  # one per second of occurrences, not one per fire
    assert all(r.recurring and r.next_deadline is not None for r in records)


def test_the_series_rule_keeps_about_the_bound_per_ttl() -> None:
    ttl = timedelta(days=7)
    start = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
    every_minute = [start + 60 * i for i in range(7 * 24 * 60)]
    kept = sum(
        record_occurrence(at, following, ttl) for at, following in itertools.pairwise(every_minute)
    )
    assert SERIES_RECORDS_PER_TTL * 0.9 <= kept <= SERIES_RECORDS_PER_TTL * 1.1
    daily = [start + 86_400 * i for i in range(8)]
    assert all(record_occurrence(a, b, ttl) for a, b in itertools.pairwise(daily))
    assert record_occurrence(start, None, ttl)  # the end of a series is always recorded


def test_the_history_costs_the_firing_loop_no_statement_of_its_own() -> None:
    f = _firing()
    f.store.enqueue([msg(f"b{i}", f.at(100)) for i in range(50)], 0)
    f.store.statements.clear()
    f.run_for(200, step_ms=10)
    phase2 = [s for s in f.store.statements if "fired" in s or "history" in s or "ended" in s]
    assert phase2 == ["delete_fired"]  # one delete for the batch, its records in it
    assert len(f.store.ended_messages("b49")) == 1


# -- CHRONOS_HISTORY_FIRED=false: only the failures


def _timer(message_id: str, **fields: Any) -> Timer:
    at = datetime(2030, 1, 1, tzinfo=UTC)
    row = ClaimedRow(message_id, 1.0, at, None, None, [], 0, None, None, 0.0, 0.0)
    return Timer(row, 0, position=(0, 7), **fields)


def test_endings_leave_fired_claims_out_and_keep_the_failures_without_history_fired() -> None:
    batch = [
        _timer("fired"),
        _timer("expired", dead_letter=True, reason="expired", lateness=2.0),
        _timer("refused", dead_letter=True, reason="publish_failed"),
    ]
    kept = endings(batch, settings(history_fired=False))
    assert kept == [
        None,
        Ending(EXPIRED, DEAD_LETTER, 0, 7, 2_000, "expired"),
        Ending(DEAD_LETTERED, DEAD_LETTER, 0, 7, 0, "publish_failed"),
    ]
    assert endings(batch, settings())[0] == Ending(FIRED, OUTPUT, 0, 7, 0, None)
    assert endings(batch, settings(history_fired=False, history_ttl=timedelta(0))) == [None] * 3


def test_without_history_fired_a_fired_message_leaves_no_record_and_a_failure_does() -> None:
    f = _firing(history_fired=False, max_lateness_ms=1_000)
    f.store.enqueue([msg("stale", f.at(100))], 0)
    f.clock.advance(5_100)
    f.run_for(100, step_ms=10)
    f.store.enqueue([msg("m", f.at(100))], 0)
    f.run_for(200, step_ms=10)
    assert [r.topic for r in f.publisher.records] == [DEAD_LETTER, OUTPUT]
    assert len(f.store) == 0 and f.store.ended_messages("m") == []
    (record,) = f.store.ended_messages("stale")
    assert (record.outcome, record.reason) == (EXPIRED, "expired")
