"""CHRONOS_AUDIT_TOPIC on the firing side: one valid event per outcome (fired with the output
record's position, expired, dead-lettered), written after the record it describes, and an audit
topic the broker refuses never holds back firing."""

from __future__ import annotations

from dataclasses import replace

from confluent_kafka import KafkaError
from prometheus_client import REGISTRY

from chronos.kafka.audit import AuditTrail
from chronos.protocol import (
    DEAD_LETTER_CODE_HEADER,
    TOPIC_HEADER,
    Rejection,
    format_deadline,
    parse_record,
    topic_policy,
)
from chronos.store import Outcome
from chronos.testing import FakePublisher
from tests.support.audit import valid_events
from tests.support.store_contract import msg
from tests.unit.helpers import DEAD_LETTER, INPUT, OUTPUT, Firing

AUDIT = "audit"


def _stored(f: Firing, message_id: str, due_in_ms: float, tenant: str = "") -> None:
    message = replace(msg(message_id, f.at(due_in_ms)), tenant=tenant)
    assert f.store.enqueue([message], 0) == [Outcome.INSERTED]


def _events(f: Firing) -> list[dict[str, object]]:
    return valid_events(r.value for r in f.publisher.delivered(AUDIT))


def _dropped(reason: str) -> float:
    return REGISTRY.get_sample_value("chronos_audit_dropped_total", {"reason": reason}) or 0


def test_off_by_default_nothing_but_the_fired_record_is_produced() -> None:
    f = Firing.create()
    assert f.settings.audit_topic == ""
    _stored(f, "a", 100)
    f.run_for(300, step_ms=10)
    assert [r.topic for r in f.publisher.records] == [OUTPUT]


def test_a_fired_message_has_one_event_with_its_output_position() -> None:
    f = Firing.create(audit_topic=AUDIT)
    _stored(f, "first", 100)
    _stored(f, "second", 200, tenant="acme")
    f.run_for(400, step_ms=10)
    assert [r.topic for r in f.publisher.records] == [OUTPUT, AUDIT, OUTPUT, AUDIT]
    first, second = _events(f)
    assert (first["event"], first["id"], first["node"]) == ("fired", "first", f.settings.node_id)
    assert first["output"] == {"topic": OUTPUT, "partition": 0, "offset": 0}
    assert second["output"] == {"topic": OUTPUT, "partition": 0, "offset": 1}
    assert second["tenant"] == "acme"
    lateness = first["lateness_ms"]
    assert isinstance(lateness, float) and -60 <= lateness <= 20  # fired at deadline - advance
    assert f.publisher.records[1].key == b"first"
    assert len(f.store) == 0


def test_expired_and_dead_lettered_messages_say_why_and_where() -> None:
    f = Firing.create(audit_topic=AUDIT, max_lateness_ms=60_000, max_publish_attempts=2)
    f.publisher.decide = lambda r: (
        KafkaError(KafkaError.MSG_SIZE_TOO_LARGE) if r.key == b"big" and r.topic == OUTPUT else None
    )
    _stored(f, "stale", 100)
    f.clock.advance(3_600_000)
    f.run_for(200, step_ms=10)
    assert f.store.enqueue([msg("big", f.at(100), key=b"big", value=b"v")], 0)
    f.run_for(3000, step_ms=10)
    expired, dead = _events(f)
    assert (expired["event"], expired["id"], expired["code"]) == ("expired", "stale", "expired")
    assert expired["dead_letter"] == {"topic": DEAD_LETTER, "partition": 0, "offset": 0}
    assert (dead["event"], dead["id"], dead["code"]) == ("dead_lettered", "big", "publish_failed")
    assert dead["dead_letter"] == {"topic": DEAD_LETTER, "partition": 0, "offset": 1}
    assert "failed 2 times" in str(dead["reason"])


def test_a_dropped_expired_message_has_no_dead_letter() -> None:
    f = Firing.create(audit_topic=AUDIT, max_lateness_ms=1_000, expired_action="drop")
    _stored(f, "stale", 100)
    f.clock.advance(5_100)
    f.run_for(200, step_ms=10)
    (event,) = _events(f)
    assert (event["event"], event["dead_letter"]) == ("expired", None)


def test_an_audit_topic_the_broker_refuses_never_holds_back_firing() -> None:
    f = Firing.create(audit_topic=AUDIT)
    f.publisher.decide = lambda r: (
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED) if r.topic == AUDIT else None
    )
    before = _dropped("refused")
    for i in range(5):
        _stored(f, f"m{i}", 100 + i)
    f.run_for(400, step_ms=10)
    assert len(f.publisher.delivered(OUTPUT)) == 5
    assert len(f.store) == 0  # fired and deleted: the audit is not the contract
    assert _dropped("refused") == before + 5
    assert len(f.publisher.produced(AUDIT)) == 5  # tried once each, never again


def test_audit_records_awaiting_a_report_are_bounded() -> None:
    publisher = FakePublisher(auto=False)
    trail = AuditTrail(publisher, AUDIT, max_outstanding=2)
    before = _dropped("backlog")
    for i in range(5):
        trail.add({"event": "fired", "id": f"m{i}"})
    assert trail.write() == 2
    assert _dropped("backlog") == before + 3
    publisher.deliver()
    publisher.poll(0)
    assert trail.outstanding == 0
    trail.add({"event": "fired", "id": "m5"})
    assert trail.write() == 1


def _stored_for(f: Firing, message_id: str, topic: str, *, every: str | None = None) -> None:
    """A row naming ``topic``, as it was stored before that topic was refused."""
    pairs = [("chronosMessageId", message_id.encode()), (TOPIC_HEADER, topic.encode())]
    pairs.append(("chronosDeadline", format_deadline(f.at(100)).encode()))
    if every is not None:
        pairs.append(("chronosEvery", every.encode()))
    allowed = topic_policy(OUTPUT, "*")
    m = parse_record(b"k", b"v", pairs, now=f.clock.now(), topic_allowed=allowed)
    assert not isinstance(m, Rejection), m
    assert f.store.enqueue([m], 0) == [Outcome.INSERTED]


def test_a_stored_row_naming_the_audit_or_input_topic_is_dead_lettered_never_fired() -> None:
    f = Firing.create(audit_topic=AUDIT, allowed_topics="*")
    _stored_for(f, "forged", AUDIT)
    _stored_for(f, "loop", INPUT, every="PT1S")  # a series: ends, never dead-lettered forever
    _stored_for(f, "fine", "other")
    f.run_for(3000, step_ms=10)
    assert [r.topic for r in f.publisher.delivered(OUTPUT)] == []
    assert [r.key for r in f.publisher.delivered("other")] == [b"k"]
    assert f.publisher.delivered(INPUT) == []
    dead = f.publisher.delivered(DEAD_LETTER)
    assert [dict(r.headers)[DEAD_LETTER_CODE_HEADER] for r in dead] == [b"topic_not_allowed"] * 2
    events = {e["id"]: e for e in _events(f)}  # every record of the audit topic is Chronos's
    assert {i: e["event"] for i, e in events.items()} == {
        "forged": "dead_lettered",
        "loop": "dead_lettered",
        "fine": "fired",
    }
    assert events["forged"]["code"] == "topic_not_allowed"
    assert "'audit' is not allowed" in str(events["forged"]["reason"])
    assert len(f.store) == 0


def test_a_stored_row_naming_the_audit_topic_is_dropped_without_a_dead_letter_topic() -> None:
    f = Firing.create(audit_topic=AUDIT, allowed_topics="*", dead_letter_topic="")
    _stored_for(f, "forged", AUDIT)
    f.run_for(300, step_ms=10)
    (event,) = _events(f)
    assert (event["event"], event["code"], event["dead_letter"]) == (
        "dead_lettered",
        "topic_not_allowed",
        None,
    )
    assert len(f.store) == 0
