"""chronosAction and chronosTopic: parsing, and intake folding and applying them in one batch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chronos.config.settings import load
from chronos.protocol import (
    ACTION_HEADER,
    DEAD_LETTER_REASON_HEADER,
    MESSAGE_ID_HEADER,
    TOPIC_HEADER,
    Action,
    Rejection,
    ScheduledMessage,
    format_deadline,
    parse_record,
    topic_policy,
)
from tests.support.kafka import chronos_headers
from tests.unit.helpers import DEAD_LETTER, OUTPUT
from tests.unit.intake.helpers import Intake

NOW = datetime(2030, 1, 1, tzinfo=UTC)
H = list[tuple[str, bytes | None]]


def headers(action: str | None = None, topic: str | None = None, deadline: bool = True) -> H:
    out: H = (
        chronos_headers("a", NOW + timedelta(seconds=5))
        if deadline
        else [(MESSAGE_ID_HEADER, b"a")]
    )
    if action is not None:
        out.append((ACTION_HEADER, action.encode()))
    if topic is not None:
        out.append((TOPIC_HEADER, topic.encode()))
    out.append(("x", b"1"))
    return out


def test_no_action_header_is_a_schedule_and_chronos_headers_are_not_relayed() -> None:
    parsed = parse_record(b"k", b"v", headers(topic=OUTPUT), topic_allowed=topic_policy(OUTPUT, ""))
    assert isinstance(parsed, ScheduledMessage)
    assert (parsed.action, parsed.target_topic, parsed.headers) == (
        Action.SCHEDULE,
        OUTPUT,
        [("x", b"1")],
    )


def test_a_cancel_needs_no_deadline_and_drops_the_value() -> None:
    parsed = parse_record(b"k", b"v", headers("cancel", deadline=False), now=NOW)
    assert isinstance(parsed, ScheduledMessage)
    assert (parsed.id, parsed.action, parsed.value, parsed.headers) == (
        "a",
        Action.CANCEL,
        None,
        [],
    )


def test_a_reschedule_needs_a_deadline() -> None:
    parsed = parse_record(b"k", b"v", headers("Reschedule"))
    assert isinstance(parsed, ScheduledMessage) and parsed.action is Action.RESCHEDULE
    missing = parse_record(b"k", b"v", headers("reschedule", deadline=False))
    assert isinstance(missing, Rejection) and missing.code == "missing_deadline"


@pytest.mark.parametrize("raw", ["delete", "", "cancel2"])
def test_an_unknown_action_is_rejected_with_the_reason(raw: str) -> None:
    parsed = parse_record(b"k", b"v", headers(raw))
    assert isinstance(parsed, Rejection) and parsed.code == "unknown_action"
    assert ACTION_HEADER in parsed.reason


def test_topics_are_allowed_by_glob_patterns_only() -> None:
    allowed = topic_policy(OUTPUT, "billing.*, audit")
    assert [allowed(t) for t in (OUTPUT, "billing.eu", "audit", "auditx", "other")] == [
        True,
        True,
        True,
        False,
        False,
    ]
    denied = parse_record(b"k", b"v", headers(topic="other"), topic_allowed=allowed)
    assert isinstance(denied, Rejection) and denied.code == "topic_not_allowed"
    assert "'other'" in denied.reason
    nothing = parse_record(b"k", b"v", headers(topic="billing.eu"))
    assert isinstance(nothing, Rejection) and nothing.code == "topic_not_allowed"
    bad = parse_record(b"k", b"v", headers(topic="a b"), topic_allowed=allowed)
    assert isinstance(bad, Rejection) and bad.code == "invalid_topic"


@pytest.mark.parametrize(
    ("topic", "code", "says"),
    [
        (".", "invalid_topic", "not a Kafka topic name"),
        ("..", "invalid_topic", "not a Kafka topic name"),
        ("t" * 250, "invalid_topic", "not a Kafka topic name"),
        ("__consumer_offsets", "topic_not_allowed", "internal topic"),
        ("__transaction_state", "topic_not_allowed", "internal topic"),
        ("chronos-input", "topic_not_allowed", "never the input or dead-letter topic"),
        ("chronos-dead-letter", "topic_not_allowed", "never the input or dead-letter topic"),
    ],
)
def test_a_topic_that_can_never_be_written_is_refused_whatever_the_allow_list(
    topic: str, code: str, says: str
) -> None:
    """With CHRONOS_ALLOWED_TOPICS=* every legal name is allowed, but not these."""
    allowed = topic_policy(OUTPUT, "*", refused=("chronos-input", "chronos-dead-letter"))
    parsed = parse_record(b"k", b"v", headers(topic=topic), topic_allowed=allowed)
    assert isinstance(parsed, Rejection), parsed
    assert (parsed.code, says in parsed.reason) == (code, True), parsed.reason
    longest = parse_record(b"k", b"v", headers(topic="t" * 249), topic_allowed=allowed)
    assert not isinstance(longest, Rejection)


def test_the_output_topic_stays_allowed_even_when_it_is_also_refused() -> None:
    assert topic_policy(OUTPUT, "", refused=(OUTPUT,))(OUTPUT)


def test_allowed_topics_setting_is_validated() -> None:
    assert load(environ={"CHRONOS_ALLOWED_TOPICS": " a.* ,b "}).allowed_topics == "a.*,b"
    with pytest.raises(Exception, match="ALLOWED_TOPICS"):
        load(environ={"CHRONOS_ALLOWED_TOPICS": "a b"})
    assert load(environ={}).cancel_ttl_ms == 3_600_000


# ------------------------------------------------------------------------------- intake


def action(t: Intake, message_id: str, name: str, in_ms: float = 5000, **kw: object) -> object:
    extra: H = [(ACTION_HEADER, name.encode())]
    topic = kw.get("topic")
    if isinstance(topic, str):
        extra.append((TOPIC_HEADER, topic.encode()))
    value = kw.get("value", b"v")
    assert value is None or isinstance(value, bytes)
    if name == "cancel":
        return t.record(
            None, None, value=value, extra=[(MESSAGE_ID_HEADER, message_id.encode()), *extra]
        )
    return t.record(message_id, in_ms, value=value, extra=extra)


def test_a_cancel_deletes_the_waiting_message() -> None:
    t = Intake()
    assert t.process(t.record("a", 5000))
    assert t.process(action(t, "a", "cancel"))
    assert t.store.get("a") is None
    assert t.consumer.stored  # the cancel's offset moved on


def test_a_cancel_before_its_schedule_wins_in_later_batches_and_in_the_same_one() -> None:
    t = Intake()
    assert t.process(action(t, "a", "cancel"))
    assert t.process(t.record("a", 5000), t.record("b", 5000))
    assert t.store.get("a") is None and t.store.get("b") is not None
    assert t.process(t.record("c", 5000), action(t, "c", "cancel"), t.record("c", 6000))
    assert t.store.get("c") is None
    assert t.process(t.record("late", -1000), action(t, "late", "cancel"))
    assert t.publisher.produced(OUTPUT) == []  # a lapsed message cancelled in its batch


def test_a_reschedule_replaces_the_payload_and_the_deadline() -> None:
    t = Intake()
    assert t.process(t.record("a", 5000, value=b"old"))
    assert t.process(action(t, "a", "reschedule", 9000, value=b"new"))
    row = t.store.get("a")
    assert row is not None and row.value == b"new"
    assert format_deadline(row.deadline) == format_deadline(t.clock.now() + timedelta(seconds=9))


def test_a_denied_topic_is_dead_lettered_and_an_allowed_one_stored() -> None:
    t = Intake(allowed_topics="billing.*")
    assert t.process(
        t.record("a", 5000, extra=[(TOPIC_HEADER, b"billing.eu")]),
        t.record("b", 5000, extra=[(TOPIC_HEADER, b"secret")]),
    )
    row = t.store.get("a")
    assert row is not None and row.target_topic == "billing.eu"
    assert t.store.get("b") is None
    (dead,) = t.publisher.produced(DEAD_LETTER)
    reason = dict(dead.headers)[DEAD_LETTER_REASON_HEADER] or b""
    assert b"'secret' is not allowed" in reason
    assert dict(dead.headers)["chronosDeadLetterCode"] == b"topic_not_allowed"


def test_a_lapsed_message_fires_straight_to_its_topic() -> None:
    t = Intake(allowed_topics="billing.*")
    assert t.process(t.record("a", -10, extra=[(TOPIC_HEADER, b"billing.eu")]))
    assert [r.topic for r in t.publisher.records] == ["billing.eu"]


def test_an_unknown_action_is_dead_lettered() -> None:
    t = Intake()
    assert t.process(action(t, "a", "purge"))
    (dead,) = t.publisher.produced(DEAD_LETTER)
    assert b"chronosAction 'purge'" in (dict(dead.headers)[DEAD_LETTER_REASON_HEADER] or b"")
