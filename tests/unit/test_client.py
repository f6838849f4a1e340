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


def test_a_series_parses_back_into_its_rule() -> None:
    from chronos.recurrence import Missed, Rule, decode

    p = RecordingProducer()
    until = datetime(2031, 1, 1)  # naive: UTC
    repeat = client.Repeat(cron="0 9 * * 1-5", time_zone="Europe/Paris", until=until)
    client.schedule(p, value=b"report", message_id="daily", repeat=repeat)
    m = parsed(p)
    assert m.id == "daily"
    assert decode(m.recurrence or "") == Rule(
        cron="0 9 * * 1-5", zone="Europe/Paris", until=until.replace(tzinfo=UTC)
    )
    start = datetime(2030, 5, 1, 12, tzinfo=UTC)
    client.schedule(
        p,
        value=b"tick",
        deadline=start,
        repeat=client.Repeat(every=timedelta(seconds=1.5), missed="all"),
        expires=timedelta(seconds=10),
    )
    m = parsed(p)
    assert m.deadline == start
    assert decode(m.recurrence or "") == Rule(every_ms=1_500, missed=Missed.ALL)
    assert m.expires_ms == 10_000
    client.schedule(p, value=b"x", repeat=client.Repeat(every="PT5M"))
    assert decode(parsed(p).recurrence or "").every_ms == 300_000


@pytest.mark.parametrize(
    "kwargs",
    [
        {"every": 0.5},
        {"every": "P1M"},
        {"cron": "* * *"},
        {"cron": "0 9 * * *", "time_zone": "Nowhere/Else"},
        {"every": 60, "cron": "* * * * *"},
        {"missed": "never", "every": 60},
        {},
    ],
)
def test_a_bad_series_is_refused_when_made(kwargs: dict[str, Any]) -> None:
    if not kwargs:
        with pytest.raises(ValueError, match="needs every or cron"):
            client.Repeat()
        with pytest.raises(ValueError, match="needs chronosEvery or chronosCron"):
            client.Repeat(until=datetime(2031, 1, 1, tzinfo=UTC))
        return
    with pytest.raises(ValueError):
        client.Repeat(**kwargs)


def test_recurrence_headers_cannot_be_passed_as_plain_headers() -> None:
    with pytest.raises(ValueError, match="set by the client"):
        client.schedule(
            RecordingProducer(), value=b"v", delay=1, headers=[("chronosEvery", "PT1S")]
        )


def test_a_tenant_is_given_by_name_and_parses_back() -> None:
    p = RecordingProducer()
    client.schedule(p, value=b"v", delay=1, message_id="t1", tenant="acme")
    assert parsed(p).tenant == "acme"
    client.reschedule(p, message_id="t1", value=b"w", delay=2, tenant="acme")
    assert (parsed(p).tenant, parsed(p).action) == ("acme", Action.RESCHEDULE)
    client.schedule(p, value=b"v", delay=1)
    assert parsed(p).tenant == ""  # none given: the default tenant


@pytest.mark.parametrize("tenant", ["", "x" * 129, "a\x00b"])
def test_a_bad_tenant_is_refused_when_called(tenant: str) -> None:
    p = RecordingProducer()
    with pytest.raises(ValueError, match="tenant"):
        client.schedule(p, value=b"v", delay=1, tenant=tenant)
    assert p.records == []


def test_a_tenant_header_points_to_the_tenant_argument() -> None:
    with pytest.raises(ValueError, match="tenant="):
        client.schedule(
            RecordingProducer(), value=b"v", delay=1, headers=[("chronosTenant", "acme")]
        )
