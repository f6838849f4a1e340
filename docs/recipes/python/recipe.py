"""Scheduling through Chronos from Python with ``chronos.client`` and confluent-kafka.

What each header means: docs/recipes.md. The test suite runs this program
(tests/integration/test_recipes.py).

    python recipe.py [BOOTSTRAP] [INPUT_TOPIC] [PREFIX]

PREFIX starts every id and key, so that runs do not collide (an id already waiting is ignored).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

from confluent_kafka import KafkaError, Message, Producer

from chronos import client


def main(bootstrap: str = "127.0.0.1:9092", topic: str = "chronos-input", prefix: str = "") -> None:
    # --8<-- [start:send]
    # Each call produces one record and returns; the delivery reports come with flush() below.
    failed: list[KafkaError] = []

    def delivered(error: KafkaError | None, _record: Message) -> None:
        if error is not None:
            failed.append(error)

    # Idempotent: a retry neither duplicates nor reorders.
    config = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "on_delivery": delivered}
    producer = Producer(config)
    # --8<-- [end:send]
    now = datetime.now(UTC)

    # --8<-- [start:in]
    # In 3 seconds: an id of your choosing and the deadline (delay=: now + 3 s).
    client.schedule(
        producer,
        topic=topic,
        key=prefix + "order-1",
        value="pay order 1",
        message_id=prefix + "reminder-1",
        delay=3,
    )
    # --8<-- [end:in]

    # --8<-- [start:at]
    # At an instant: any aware datetime, such as
    # datetime(2030, 1, 1, 9, tzinfo=ZoneInfo("Europe/Paris")) (naive: UTC); here 4 s from now.
    at = now + timedelta(seconds=4)
    client.schedule(
        producer,
        topic=topic,
        key=prefix + "order-2",
        value="ship order 2",
        message_id=prefix + "shipping-2",
        deadline=at,
    )
    # --8<-- [end:at]

    # --8<-- [start:reschedule]
    # Planned for a minute from now, then moved to 5 s from now with a new value: the same id,
    # the same key (one partition: Chronos reads the two in order).
    client.schedule(
        producer,
        topic=topic,
        key=prefix + "order-3",
        value="first plan",
        message_id=prefix + "follow-up-3",
        deadline=now + timedelta(seconds=60),
    )
    client.reschedule(
        producer,
        topic=topic,
        key=prefix + "order-3",
        value="new plan",
        message_id=prefix + "follow-up-3",
        deadline=now + timedelta(seconds=5),
    )
    # --8<-- [end:reschedule]

    # --8<-- [start:cancel]
    # Scheduled, then cancelled: it never fires. A cancel needs no deadline nor value.
    client.schedule(
        producer,
        topic=topic,
        key=prefix + "order-4",
        value="never sent",
        message_id=prefix + "reminder-4",
        deadline=now + timedelta(seconds=3),
    )
    client.cancel(producer, prefix + "reminder-4", topic=topic, key=prefix + "order-4")
    # --8<-- [end:cancel]

    # --8<-- [start:every]
    # A series: every 2 seconds from 2 s from now, none after 7 s from now (3 in all).
    client.schedule(
        producer,
        topic=topic,
        key=prefix + "heartbeat",
        value="tick",
        message_id=prefix + "heartbeat",
        deadline=now + timedelta(seconds=2),
        repeat=client.Repeat(every=timedelta(seconds=2), until=now + timedelta(seconds=7)),
    )
    # --8<-- [end:every]

    # --8<-- [start:cron]
    # Weekdays at 9:00 Paris time, for the tenant "acme", until cancelled.
    client.schedule(
        producer,
        topic=topic,
        key=prefix + "acme-report",
        value="send the daily report",
        message_id=prefix + "daily-report",
        tenant="acme",
        repeat=client.Repeat(cron="0 9 * * 1-5", time_zone="Europe/Paris"),
    )
    # --8<-- [end:cron]

    # --8<-- [start:flush]
    if producer.flush(30) > 0 or failed:
        sys.exit(f"chronos recipe: not delivered: {failed or 'timed out'}")
    # --8<-- [end:flush]


if __name__ == "__main__":
    main(*sys.argv[1:4])
