"""Intake writes the history records of the messages it ends without storing them: fired directly
(already due on arrival) with the delivered record's partition and offset, expired on arrival
(dead-lettered or dropped) with the reason, refused by the database; one store call per settle
pass, never per message; nothing with the history off; a failing write never holds the offsets."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import KafkaError
from prometheus_client import REGISTRY

from chronos.errors import StoreError
from chronos.store.history import DEAD_LETTERED, EXPIRED, FIRED
from tests.unit.helpers import DEAD_LETTER, INPUT, OUTPUT
from tests.unit.intake.helpers import Intake

WEEK = timedelta(days=7)


def _intake(**overrides: Any) -> Intake:
    t = Intake(**overrides)
    t.store.maintain_history(WEEK)  # the leader's days
    return t


def _unrecorded() -> float:
    return REGISTRY.get_sample_value("chronos_history_unrecorded_total") or 0


def test_an_already_due_record_fires_directly_and_is_recorded_fired_at_its_offset() -> None:
    t = _intake()
    assert t.process(t.record("first", -2_000), t.record("late", -1_000, key=b"order-7"))
    t.loop.history.wait(5)
    assert len(t.publisher.delivered(OUTPUT)) == 2 and "late" not in t.store
    (record,) = t.store.ended_messages("late")
    assert record.key == b"order-7"  # found by its key like any ended message
    assert (record.outcome, record.topic, record.partition, record.offset) == (FIRED, OUTPUT, 0, 1)
    assert record.node == t.loop.settings.node_id and record.attempt == 1
    assert record.lateness_ms is not None and 1_000 <= record.lateness_ms <= 1_001
    assert record.tenant == "" and record.reason is None and not record.recurring
    assert [r.offset for r in t.store.ended_messages("first")] == [0]
    assert t.store.statements.count("record_ended") == 1  # one call for the batch
    assert t.consumer.stored == {(INPUT, 0): 3}


@pytest.mark.parametrize("action", ["dead-letter", "drop"])
def test_an_expired_on_arrival_record_is_recorded_expired_with_the_reason(action: str) -> None:
    t = _intake(max_lateness_ms=60_000, expired_action=action)
    assert t.process(t.record("stale", -3_600_000))
    t.loop.history.wait(5)
    (record,) = t.store.ended_messages("stale")
    assert (record.outcome, record.reason) == (EXPIRED, "expired")
    assert record.lateness_ms is not None and record.lateness_ms >= 3_600_000
    if action == "drop":
        assert t.publisher.records == []
        assert (record.topic, record.partition, record.offset, record.attempt) == (None,) * 4
    else:
        (dead,) = t.publisher.delivered(DEAD_LETTER)
        assert (record.topic, record.offset, record.attempt) == (DEAD_LETTER, dead.offset, 1)
    assert t.consumer.stored == {(INPUT, 0): 2}


def test_a_record_the_database_refuses_is_recorded_dead_lettered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    t = _intake()
    enqueue = t.store.enqueue

    def refusing(messages: Any, *args: Any, **kwargs: Any) -> Any:
        if any(m.id == "poison" for m in messages):
            raise StoreError("enqueue_batch failed: value out of range", retryable=False)
        return enqueue(messages, *args, **kwargs)

    monkeypatch.setattr(t.store, "enqueue", refusing)
    assert t.process(t.record("fine", 5_000), t.record("poison", 5_000))
    t.loop.history.wait(5)
    (record,) = t.store.ended_messages("poison")
    assert (record.outcome, record.reason, record.topic) == (
        DEAD_LETTERED,
        "database_refused",
        DEAD_LETTER,
    )
    assert t.store.ended_messages("fine") == [] and "fine" in t.store


def test_a_direct_publish_refused_for_good_is_recorded_dead_lettered_after_its_attempts() -> None:
    t = _intake(max_publish_attempts=2)
    t.publisher.decide = lambda r: (
        KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if r.topic == OUTPUT else None
    )
    assert t.process(t.record("big", -5))
    t.loop.history.wait(5)
    (record,) = t.store.ended_messages("big")
    assert (record.outcome, record.reason, record.topic) == (
        DEAD_LETTERED,
        "publish_failed",
        DEAD_LETTER,
    )
    assert record.attempt == 3  # after two refused publishes, as the firing path counts them


def test_history_off_writes_nothing_where_history_on_writes() -> None:
    on, off = _intake(), _intake(history_ttl=timedelta(0))  # both stores have today's day
    for t in (on, off):
        assert t.process(t.record("late", -1_000))
        t.loop.history.wait(5)
        assert [r.topic for r in t.publisher.delivered()] == [OUTPUT]
    assert [r.outcome for r in on.store.ended_messages("late")] == [FIRED]
    assert off.store.ended_messages("late") == []
    assert "record_ended" not in off.store.statements


def test_a_failing_history_write_never_holds_the_offsets_and_the_next_one_goes_on() -> None:
    t = _intake()
    before = _unrecorded()
    t.store.fail_next(1, "record_ended")
    assert t.process(t.record("lost", -1_000))
    t.loop.history.wait(5)
    assert "record_ended" in t.store.statements  # tried, and failed
    assert t.consumer.stored == {(INPUT, 0): 2}  # the offsets moved on all the same
    assert [r.topic for r in t.publisher.delivered()] == [OUTPUT]
    assert t.store.ended_messages("lost") == []  # not retried
    assert _unrecorded() == before + 1
    assert t.process(t.record("kept", -1_000))
    t.loop.history.wait(5)
    assert [r.outcome for r in t.store.ended_messages("kept")] == [FIRED]
    assert t.consumer.stored == {(INPUT, 0): 3}


def test_no_day_for_the_history_is_counted_and_intake_goes_on() -> None:
    t = Intake()  # the leader never created the history's days
    assert t.process(t.record("late", -1_000))
    t.loop.history.wait(5)
    assert t.store.unrecorded == 1 and t.store.ended_messages("late") == []
    assert t.consumer.stored == {(INPUT, 0): 2}


# -- CHRONOS_HISTORY_FIRED=false: only the failures


def test_without_history_fired_a_direct_publish_is_not_recorded_and_writes_nothing() -> None:
    t = _intake(history_fired=False)
    assert t.process(t.record("late", -1_000), t.record("later", -2_000))
    t.loop.history.wait(5)
    assert [r.topic for r in t.publisher.delivered()] == [OUTPUT, OUTPUT]
    assert t.store.ended_messages("late") == [] and t.store.ended_messages("later") == []
    assert "record_ended" not in t.store.statements  # a pass that only fired: no statement
    assert t.consumer.stored == {(INPUT, 0): 3}


@pytest.mark.parametrize("action", ["dead-letter", "drop"])
def test_without_history_fired_an_expired_on_arrival_record_is_still_recorded(action: str) -> None:
    t = _intake(history_fired=False, max_lateness_ms=60_000, expired_action=action)
    assert t.process(t.record("stale", -3_600_000), t.record("late", -1_000))
    t.loop.history.wait(5)
    assert [(r.outcome, r.reason) for r in t.store.ended_messages("stale")] == [
        (EXPIRED, "expired")
    ]
    assert t.store.ended_messages("late") == []  # fired directly, within the limit


def test_without_history_fired_a_direct_publish_refused_for_good_is_recorded_dead_lettered() -> (
    None
):
    t = _intake(history_fired=False, max_publish_attempts=2)
    t.publisher.decide = lambda r: (
        KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if r.topic == OUTPUT else None
    )
    assert t.process(t.record("big", -1_000))
    t.loop.history.wait(5)
    (record,) = t.store.ended_messages("big")
    assert (record.outcome, record.reason, record.attempt) == (DEAD_LETTERED, "publish_failed", 3)
    assert record.lateness_ms is not None and record.lateness_ms >= 1_000  # carried from arrival
