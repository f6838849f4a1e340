"""CHRONOS_MAX_LATENESS_MS: a message that would fire later than that after its deadline is never
fired stale — dead-lettered with reason "expired", or dropped and counted — while messages on
time fire as before."""

from __future__ import annotations

from prometheus_client import REGISTRY

from chronos.protocol import DEAD_LETTER_REASON_HEADER, DEAD_LETTER_SOURCE_HEADER
from chronos.store import Outcome
from tests.support.store_contract import msg
from tests.unit.helpers import DEAD_LETTER, INPUT, OUTPUT, Firing


def _stored(f: Firing, message_id: str, due_in_ms: float) -> None:
    deadline = f.at(due_in_ms)
    assert f.store.enqueue([msg(message_id, deadline, key=b"k", value=b"v")], 0) == [
        Outcome.INSERTED
    ]


def _sample(name: str, reason: str) -> float:
    return REGISTRY.get_sample_value(name, {"reason": reason}) or 0


def test_a_stale_message_is_dead_lettered_with_reason_expired_not_fired() -> None:
    f = Firing.create(max_lateness_ms=60_000)
    before = _sample("chronos_dead_lettered_messages_total", "expired")
    _stored(f, "stale", 1_000)
    _stored(f, "recent", 3_600_000 - 10_000)
    f.clock.advance(3_601_000)  # the whole cluster was away an hour: "stale" is an hour late,
    f.run_for(200, step_ms=10)  # "recent" 10 s late (within the limit: fires, late)
    by_topic = {r.topic: r for r in f.publisher.records}
    assert set(by_topic) == {OUTPUT, DEAD_LETTER}
    assert by_topic[OUTPUT].key == b"k"
    dead = by_topic[DEAD_LETTER]
    reasons = dict(dead.headers)
    reason = reasons[DEAD_LETTER_REASON_HEADER]
    assert reason is not None and reason.startswith(b"expired:"), reason
    assert b"CHRONOS_MAX_LATENESS_MS" in reason
    assert reasons[DEAD_LETTER_SOURCE_HEADER] == b"chronos/stale"
    assert reasons["chronosDeadLetterCode"] == b"expired"
    assert (dead.key, dead.value) == (b"k", b"v")
    assert len(f.store) == 0  # both settled
    assert _sample("chronos_dead_lettered_messages_total", "expired") == before + 1


def test_expired_messages_can_be_dropped_and_counted_instead() -> None:
    f = Firing.create(max_lateness_ms=1_000, expired_action="drop")
    before = _sample("chronos_dropped_messages_total", "expired")
    _stored(f, "stale", 100)
    f.clock.advance(5_100)
    f.run_for(200, step_ms=10)
    assert f.publisher.records == []
    assert len(f.store) == 0  # not fired again after a restart either
    assert _sample("chronos_dropped_messages_total", "expired") == before + 1


def test_off_by_default_a_late_message_still_fires() -> None:
    f = Firing.create()
    assert f.settings.max_lateness_ms == 0
    _stored(f, "late", 100)
    f.clock.advance(86_400_000)  # a day late
    f.run_for(200, step_ms=10)
    (record,) = f.publisher.records
    assert record.topic == OUTPUT


def test_a_record_that_arrives_past_the_limit_is_dead_lettered_by_intake() -> None:
    """The late fast path (a record already due when it arrives is published by intake at once)
    obeys the same limit: stale ones are dead-lettered with reason "expired", fresh ones go."""
    from tests.unit.intake.helpers import Intake

    t = Intake(max_lateness_ms=60_000)
    stale = t.record("stale", -3_600_000)
    fresh = t.record("fresh", -1_000)
    assert t.process(stale, fresh)
    topics = {r.topic: r for r in t.publisher.records}
    assert set(topics) == {OUTPUT, DEAD_LETTER}
    reason = dict(topics[DEAD_LETTER].headers)[DEAD_LETTER_REASON_HEADER]
    assert reason is not None and reason.startswith(b"expired:"), reason
    assert dict(topics[DEAD_LETTER].headers)["chronosDeadLetterCode"] == b"expired"
    assert "stale" not in t.store and "fresh" not in t.store
    assert t.consumer.stored == {(INPUT, 0): 3}  # both settled: the offsets move on


def test_intake_drops_a_stale_record_when_told_to() -> None:
    from tests.unit.intake.helpers import Intake

    t = Intake(max_lateness_ms=60_000, expired_action="drop")
    before = _sample("chronos_dropped_messages_total", "expired")
    assert t.process(t.record("stale", -3_600_000))
    assert t.publisher.records == []
    assert _sample("chronos_dropped_messages_total", "expired") == before + 1
