"""A small client for applications that schedule through Chronos with a confluent-kafka Producer.

    from confluent_kafka import Producer
    from chronos import client

    producer = Producer({"bootstrap.servers": "kafka:9092", "enable.idempotence": True})
    message_id = client.schedule(
        producer, value=b'{"do": "it"}', key=b"order-42", delay=30, tenant="acme"
    )
    client.reschedule(producer, message_id=message_id, value=b"...", key=b"order-42", delay=60)
    client.cancel(producer, message_id, key=b"order-42")
    # a series: weekdays at 9:00 in Paris until the end of the year (cancel ends it too)
    client.schedule(
        producer,
        value=b"report",
        message_id="daily-report",
        repeat=client.Repeat(cron="0 9 * * 1-5", time_zone="Europe/Paris", until=end_of_year),
    )
    producer.flush()

Each call produces one record to the Chronos input topic (it does not flush: call
``producer.flush()`` or ``poll()`` as usual, and pass ``on_delivery`` to learn the outcome). The
deadline is written in UTC with millisecond precision; an id is a new UUID when none is given.

**Give the same key** to a schedule and to its reschedule or cancel: records with one key go to
one partition, so Chronos reads them in the order they were produced. (A cancel that overtakes
its schedule from another partition still wins for ``CHRONOS_CANCEL_TTL_MS``, see docs/protocol.md.)
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from chronos.protocol import (
    ACTION_HEADER,
    CHRONOS_HEADERS,
    CRON_HEADER,
    DEADLINE_HEADER,
    EVERY_HEADER,
    EXPIRES_HEADER,
    MESSAGE_ID_HEADER,
    MISSED_HEADER,
    TENANT_HEADER,
    TIME_ZONE_HEADER,
    TOPIC_HEADER,
    UNTIL_HEADER,
    Action,
    format_deadline,
)
from chronos.protocol.fields import parse_tenant
from chronos.recurrence import format_duration, make_rule

__all__ = [
    "DEFAULT_INPUT_TOPIC",
    "Producer",
    "Repeat",
    "cancel",
    "deadline_of",
    "reschedule",
    "schedule",
]

DEFAULT_INPUT_TOPIC = "chronos-input"

HeaderInput = Sequence[tuple[str, bytes | str | None]]
DeliveryCallback = Callable[[Any, Any], None]


class Producer(Protocol):
    """What the client needs of a producer: ``confluent_kafka.Producer.produce``."""

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None: ...


@dataclass(frozen=True)
class Repeat:
    """A series: ``every`` (a timedelta, seconds, or an ISO-8601 duration; at least 1 s) or
    ``cron`` (five fields) in ``time_zone`` (IANA; default UTC); ``until`` (no occurrence after
    it); ``missed``: ``"latest"`` (default: after downtime only the latest missed occurrence
    fires) or ``"all"``. Checked when made (ValueError), as Chronos will read it."""

    every: timedelta | float | str | None = None
    cron: str | None = None
    time_zone: str | None = None
    until: datetime | None = None
    missed: str | None = None

    def __post_init__(self) -> None:
        rule = make_rule(self._every(), self.cron, self.time_zone, self._until(), self.missed)
        if rule is None:
            raise ValueError("a Repeat needs every or cron")

    def _every(self) -> str | None:
        if self.every is None or isinstance(self.every, str):
            return self.every
        step = self.every if isinstance(self.every, timedelta) else timedelta(seconds=self.every)
        return format_duration(step // timedelta(milliseconds=1))

    def _until(self) -> datetime | None:
        if self.until is None or self.until.tzinfo is not None:
            return self.until
        return self.until.replace(tzinfo=UTC)

    def headers(self) -> list[tuple[str, bytes | None]]:
        until = self._until()
        pairs = [
            (EVERY_HEADER, self._every()),
            (CRON_HEADER, self.cron),
            (TIME_ZONE_HEADER, self.time_zone),
            (UNTIL_HEADER, None if until is None else format_deadline(until)),
            (MISSED_HEADER, self.missed),
        ]
        return [(name, text.encode()) for name, text in pairs if text is not None]


def _expires_header(expires: timedelta | datetime | None) -> list[tuple[str, bytes | None]]:
    if expires is None:
        return []
    if isinstance(expires, timedelta):
        text = format_duration(expires // timedelta(milliseconds=1))
    else:
        text = format_deadline(expires if expires.tzinfo else expires.replace(tzinfo=UTC))
    return [(EXPIRES_HEADER, text.encode())]


def _tenant_header(tenant: str | None) -> list[tuple[str, bytes | None]]:
    if tenant is None:
        return []
    checked = parse_tenant(tenant.encode("utf-8", "surrogatepass"))
    if not isinstance(checked, str):
        raise ValueError(f"tenant {tenant[:64]!r}: {checked.reason.replace('header ', '')}")
    return [(TENANT_HEADER, tenant.encode("utf-8"))]


def deadline_of(
    deadline: datetime | None, delay: timedelta | float | None, now: datetime | None = None
) -> datetime:
    """The deadline: an aware datetime (a naive one is taken as UTC), or now + ``delay`` (a
    timedelta or seconds). Exactly one of them."""
    if (deadline is None) == (delay is None):
        raise ValueError("give exactly one of deadline and delay")
    if deadline is not None:
        return deadline.replace(tzinfo=UTC) if deadline.tzinfo is None else deadline
    step = delay if isinstance(delay, timedelta) else timedelta(seconds=delay or 0.0)
    return (now or datetime.now(UTC)) + step


def _headers(
    message_id: str,
    action: Action,
    deadline: datetime | None,
    target_topic: str | None,
    headers: HeaderInput | None,
    chronos: list[tuple[str, bytes | None]],
) -> list[tuple[str, bytes | None]]:
    out: list[tuple[str, bytes | None]] = [(MESSAGE_ID_HEADER, message_id.encode())]
    if deadline is not None:
        out.append((DEADLINE_HEADER, format_deadline(deadline).encode()))
    if action is not Action.SCHEDULE:
        out.append((ACTION_HEADER, action.value.encode()))
    if target_topic is not None:
        out.append((TOPIC_HEADER, target_topic.encode()))
    out.extend(chronos)
    for name, value in headers or ():
        if name == TENANT_HEADER:
            raise ValueError(f"header {name!r} is set by the client: pass tenant=")
        if name in CHRONOS_HEADERS:
            raise ValueError(f"header {name!r} is set by the client")
        out.append((name, value.encode() if isinstance(value, str) else value))
    return out


def _send(
    producer: Producer,
    action: Action,
    *,
    value: bytes | str | None,
    key: bytes | str | None,
    deadline: datetime | None,
    delay: timedelta | float | None,
    message_id: str | None,
    headers: HeaderInput | None,
    topic: str,
    target_topic: str | None,
    on_delivery: DeliveryCallback | None,
    repeat: Repeat | None = None,
    expires: timedelta | datetime | None = None,
    tenant: str | None = None,
) -> str:
    message_id = message_id or str(uuid.uuid4())
    if not 0 < len(message_id) <= 128:
        raise ValueError("message_id must be 1-128 characters")
    when = None
    if action is not Action.CANCEL and (repeat is None or deadline or delay is not None):
        when = deadline_of(deadline, delay)  # a series without either: its rule says when
    chronos = [
        *(repeat.headers() if repeat else []),
        *_expires_header(expires),
        *_tenant_header(tenant),
    ]
    kwargs: dict[str, Any] = {
        "key": key.encode() if isinstance(key, str) else key,
        "value": value.encode() if isinstance(value, str) else value,
        "headers": _headers(message_id, action, when, target_topic, headers, chronos),
    }
    if on_delivery is not None:
        kwargs["on_delivery"] = on_delivery
    producer.produce(topic, **kwargs)
    return message_id


def schedule(
    producer: Producer,
    *,
    value: bytes | str | None,
    key: bytes | str | None = None,
    deadline: datetime | None = None,
    delay: timedelta | float | None = None,
    message_id: str | None = None,
    headers: HeaderInput | None = None,
    topic: str = DEFAULT_INPUT_TOPIC,
    target_topic: str | None = None,
    on_delivery: DeliveryCallback | None = None,
    repeat: Repeat | None = None,
    expires: timedelta | datetime | None = None,
    tenant: str | None = None,
) -> str:
    """Schedule ``value`` (and ``key``, ``headers``) to be fired at ``deadline`` or after
    ``delay`` (seconds or a timedelta), to the output topic or ``target_topic`` (which the nodes
    must allow: ``CHRONOS_ALLOWED_TOPICS``). Returns the message id (a new UUID if none given).
    Ignored by Chronos while a message with that id is waiting. With ``repeat`` it is a series
    (``deadline``/``delay``, optional, is its first occurrence); ``expires`` (a timedelta after
    the deadline, or an instant) is how late it may still fire; ``tenant`` (1-128 characters)
    names the tenant it belongs to for fair claiming (``chronosTenant``; none: the key's prefix
    under ``CHRONOS_TENANT_FROM_KEY``, else the default tenant)."""
    return _send(
        producer,
        Action.SCHEDULE,
        value=value,
        key=key,
        deadline=deadline,
        delay=delay,
        message_id=message_id,
        headers=headers,
        topic=topic,
        target_topic=target_topic,
        on_delivery=on_delivery,
        repeat=repeat,
        expires=expires,
        tenant=tenant,
    )


def reschedule(
    producer: Producer,
    *,
    message_id: str,
    value: bytes | str | None,
    key: bytes | str | None = None,
    deadline: datetime | None = None,
    delay: timedelta | float | None = None,
    headers: HeaderInput | None = None,
    topic: str = DEFAULT_INPUT_TOPIC,
    target_topic: str | None = None,
    on_delivery: DeliveryCallback | None = None,
    repeat: Repeat | None = None,
    expires: timedelta | datetime | None = None,
    tenant: str | None = None,
) -> str:
    """Replace the waiting message ``message_id`` (deadline, key, value, headers, topic, and
    its series: a series replaced without ``repeat`` becomes a one-shot message), or schedule
    it if there is none. A message already being fired is not changed."""
    return _send(
        producer,
        Action.RESCHEDULE,
        value=value,
        key=key,
        deadline=deadline,
        delay=delay,
        message_id=message_id,
        headers=headers,
        topic=topic,
        target_topic=target_topic,
        on_delivery=on_delivery,
        repeat=repeat,
        expires=expires,
        tenant=tenant,
    )


def cancel(
    producer: Producer,
    message_id: str,
    *,
    key: bytes | str | None = None,
    topic: str = DEFAULT_INPUT_TOPIC,
    on_delivery: DeliveryCallback | None = None,
) -> str:
    """Cancel the waiting message ``message_id``; a schedule of it arriving later (within
    ``CHRONOS_CANCEL_TTL_MS``) is dropped too. Give the key of the schedule (same partition)."""
    return _send(
        producer,
        Action.CANCEL,
        value=None,
        key=key,
        deadline=None,
        delay=None,
        message_id=message_id,
        headers=None,
        topic=topic,
        target_topic=None,
        on_delivery=on_delivery,
    )
