"""CHRONOS_AUDIT_TOPIC on the intake side: a cancel or reschedule a chronosAction record applied
is one valid event saying so, by that record's topic/partition/offset; schedules, and actions
that changed nothing, are not."""

from __future__ import annotations

from chronos.protocol import (
    ACTION_HEADER,
    DEAD_LETTER_CODE_HEADER,
    DEAD_LETTER_REASON_HEADER,
    MESSAGE_ID_HEADER,
    TOPIC_HEADER,
)
from tests.support.audit import valid_events
from tests.unit.helpers import DEAD_LETTER, INPUT, OUTPUT
from tests.unit.intake.helpers import Intake

AUDIT = "audit"


def test_cancels_and_reschedules_by_kafka_are_audited_with_their_record() -> None:
    t = Intake(audit_topic=AUDIT)
    assert t.process(t.record("a", 5000), t.record("b", 5000))
    cancel = t.record(None, None, extra=[(MESSAGE_ID_HEADER, b"a"), (ACTION_HEADER, b"cancel")])
    move = t.record("b", 60_000, extra=[(ACTION_HEADER, b"reschedule")])
    unknown = t.record(None, None, extra=[(MESSAGE_ID_HEADER, b"z"), (ACTION_HEADER, b"cancel")])
    assert t.process(cancel, move, unknown)
    t.publisher.poll(0)
    cancelled, rescheduled = valid_events(r.value for r in t.publisher.delivered(AUDIT))
    assert (cancelled["event"], cancelled["id"], cancelled["via"]) == ("cancelled", "a", "kafka")
    assert cancelled["by"] == f"{INPUT}/0/3"
    assert (rescheduled["event"], rescheduled["id"], rescheduled["by"]) == (
        "rescheduled",
        "b",
        f"{INPUT}/0/4",
    )
    stored = t.store.get("b")
    assert stored is not None
    assert rescheduled["deadline"] == stored.deadline.isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


def test_off_by_default_intake_writes_no_audit() -> None:
    t = Intake()
    assert t.process(t.record("a", 5000))
    cancel = t.record(None, None, extra=[(MESSAGE_ID_HEADER, b"a"), (ACTION_HEADER, b"cancel")])
    assert t.process(cancel)
    assert t.publisher.records == []


def test_a_record_naming_the_audit_topic_is_dead_lettered_whatever_the_allow_list() -> None:
    """CHRONOS_ALLOWED_TOPICS=* allows every name but the audit topic: no forged audit event."""
    t = Intake(audit_topic=AUDIT, allowed_topics="*")
    forged = t.record("forged", -10, value=b'{"event": "fired"}', extra=[(TOPIC_HEADER, b"audit")])
    later = t.record("later", 5000, extra=[(TOPIC_HEADER, b"audit")])
    assert t.process(forged, later, t.record("fine", -10, extra=[(TOPIC_HEADER, b"other")]))
    t.publisher.poll(0)
    assert t.store.get("later") is None
    assert t.publisher.produced(AUDIT) == []
    assert [r.topic for r in t.publisher.produced(OUTPUT)] == []
    assert [r.topic for r in t.publisher.records if r.topic != DEAD_LETTER] == ["other"]
    dead = [dict(r.headers) for r in t.publisher.produced(DEAD_LETTER)]
    assert [d[DEAD_LETTER_CODE_HEADER] for d in dead] == [b"topic_not_allowed"] * 2
    assert all(b"'audit' is not allowed" in (d[DEAD_LETTER_REASON_HEADER] or b"") for d in dead)
