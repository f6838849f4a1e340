"""A small client for applications that schedule through Chronos with a confluent-kafka Producer.

    from confluent_kafka import Producer
    from chronos import client

    producer = Producer({"bootstrap.servers": "kafka:9092", "enable.idempotence": True})
    message_id = client.schedule(producer, value=b'{"do": "it"}', key=b"order-42", delay=30)
    client.reschedule(producer, message_id=message_id, value=b"...", key=b"order-42", delay=60)
    client.cancel(producer, message_id, key=b"order-42")
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
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from chronos.protocol import (
    ACTION_HEADER,
    DEADLINE_HEADER,
    MESSAGE_ID_HEADER,
    TOPIC_HEADER,
    Action,
    format_deadline,
)

__all__ = ["DEFAULT_INPUT_TOPIC", "Producer", "cancel", "deadline_of", "reschedule", "schedule"]

DEFAULT_INPUT_TOPIC = "chronos-input"

HeaderInput = Sequence[tuple[str, bytes | str | None]]
DeliveryCallback = Callable[[Any, Any], None]


class Producer(Protocol):
    """What the client needs of a producer: ``confluent_kafka.Producer.produce``."""

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None: ...


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
) -> list[tuple[str, bytes | None]]:
    out: list[tuple[str, bytes | None]] = [(MESSAGE_ID_HEADER, message_id.encode())]
    if deadline is not None:
        out.append((DEADLINE_HEADER, format_deadline(deadline).encode()))
    if action is not Action.SCHEDULE:
        out.append((ACTION_HEADER, action.value.encode()))
    if target_topic is not None:
        out.append((TOPIC_HEADER, target_topic.encode()))
    for name, value in headers or ():
        if name in (MESSAGE_ID_HEADER, DEADLINE_HEADER, ACTION_HEADER, TOPIC_HEADER):
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
) -> str:
    message_id = message_id or str(uuid.uuid4())
    if not 0 < len(message_id) <= 128:
        raise ValueError("message_id must be 1-128 characters")
    when = None if action is Action.CANCEL else deadline_of(deadline, delay)
    kwargs: dict[str, Any] = {
        "key": key.encode() if isinstance(key, str) else key,
        "value": value.encode() if isinstance(value, str) else value,
        "headers": _headers(message_id, action, when, target_topic, headers),
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
) -> str:
    """Schedule ``value`` (and ``key``, ``headers``) to be fired at ``deadline`` or after
    ``delay`` (seconds or a timedelta), to the output topic or ``target_topic`` (which the nodes
    must allow: ``CHRONOS_ALLOWED_TOPICS``). Returns the message id (a new UUID if none given).
    Ignored by Chronos while a message with that id is waiting."""
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
) -> str:
    """Replace the waiting message ``message_id`` (deadline, key, value, headers, topic), or
    schedule it if there is none. A message already being fired is not changed."""
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
