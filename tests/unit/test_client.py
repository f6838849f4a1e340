"""chronos.client: what it produces parses back, through the protocol, into what was asked."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from chronos import client
from chronos.protocol import Action, ScheduledMessage, parse_record, topic_policy


class RecordingProducer:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None:
        assert not args
        self.records.append((topic, kwargs))


def parsed(producer: RecordingProducer, index: int = -1) -> ScheduledMessage:
    _topic, kw = producer.records[index]
    result = parse_record(
        kw["key"], kw["value"], kw["headers"], topic_allowed=topic_policy("o", "t*")
    )
    assert isinstance(result, ScheduledMessage), result
    return result


def test_schedule_generates_a_uuid_and_formats_the_deadline_in_utc_ms() -> None:
    p = RecordingProducer()
    deadline = datetime(2030, 5, 1, 12, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    mid = client.schedule(p, value=b"v", key="k", deadline=deadline, headers=[("x", "1")])
    uuid.UUID(mid)
    assert p.records[0][0] == "chronos-input"
    m = parsed(p)
    assert (m.id, m.key, m.value, m.action, m.headers) == (
        mid,
        b"k",
        b"v",
        Action.SCHEDULE,
        [("x", b"1")],
    )
    assert m.deadline == datetime(2030, 5, 1, 10, 0, 0, 123000, tzinfo=UTC)


def test_delay_target_topic_reschedule_and_cancel() -> None:
    p = RecordingProducer()
    before = datetime.now(UTC)
    client.schedule(p, value=None, delay=1.5, message_id="a", topic="in", target_topic="t1")
    m = parsed(p)
    assert p.records[0][0] == "in" and m.target_topic == "t1" and m.value is None
    assert (
        before + timedelta(seconds=1.49) <= m.deadline <= datetime.now(UTC) + timedelta(seconds=2)
    )
    client.reschedule(p, message_id="a", value=b"new", delay=timedelta(minutes=1))
    assert (parsed(p).action, parsed(p).value) == (Action.RESCHEDULE, b"new")
    assert client.cancel(p, "a", key=b"k") == "a"
    m = parsed(p)
    assert (m.action, m.id) == (Action.CANCEL, "a")
    assert p.records[-1][1]["key"] == b"k"


def test_bad_calls_are_refused() -> None:
    p = RecordingProducer()
    with pytest.raises(ValueError, match="exactly one"):
        client.schedule(p, value=b"v")
    with pytest.raises(ValueError, match="exactly one"):
        client.schedule(p, value=b"v", delay=1, deadline=datetime.now(UTC))
    with pytest.raises(ValueError, match="set by the client"):
        client.schedule(p, value=b"v", delay=1, headers=[("chronosTopic", b"x")])
    with pytest.raises(ValueError, match="1-128"):
        client.schedule(p, value=b"v", delay=1, message_id="x" * 129)
    assert p.records == []
