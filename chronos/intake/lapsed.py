"""What intake does with a message that arrives already due and unknown (the enqueue statement's
``fire_now``): it publishes it directly to its topic, never storing it, unless it is past its
expiry limit (CHRONOS_MAX_LATENESS_MS, or its own chronosExpires): then it is never published
late, but dead-lettered with reason "expired" or dropped (CHRONOS_EXPIRED_ACTION). With the
history on, each carries its history record (``chronos.intake.history``): fired, or expired,
with how late it was on the database clock when it was handed to the producer, as the firing
path measures it (a fired one is written only with CHRONOS_HISTORY_FIRED=true)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import cast

from confluent_kafka import Message

from chronos.config.policy import expiry_limit_ms, expiry_limit_text
from chronos.config.settings import Settings
from chronos.intake.history import arrival_record
from chronos.intake.records import Pending
from chronos.observability import metrics
from chronos.protocol import (
    Headers,
    ScheduledMessage,
    dead_letter_headers,
    relay_headers,
    scheduled_headers,
)
from chronos.store import EndedOnArrival
from chronos.store.history import EXPIRED, FIRED

log = logging.getLogger("chronos.intake.loop")  # the intake loop's logger: one name for intake

Clock = Callable[[bool], datetime]
"""The database clock as intake reads it (``IntakeLoop.database_now``; True: needed even when
no maximum delay or lateness is configured)."""


def on_arrival(
    settings: Settings, message: ScheduledMessage, record: Message, now: Clock
) -> tuple[Pending | None, EndedOnArrival | None]:
    """What intake publishes for a lapsed ``message`` (``record``: its input record): its direct
    publish, or its dead letter (expired); or nothing (dropped, counted and logged), then the
    history record of the drop, written when its batch settles."""
    history = bool(settings.history_ttl)
    own = message.expires_ms
    limit_ms = expiry_limit_ms(own, settings)
    where = f"{record.topic()}/{record.partition()}/{record.offset()}"
    if limit_ms is None and not history:
        return _direct(settings, message, where, None), None
    late = now(own is not None or history) - message.deadline
    late_ms = round(late.total_seconds() * 1000)
    if limit_ms is None or late <= timedelta(milliseconds=limit_ms):
        # Carried even while fired messages are not recorded (ArrivalHistory leaves it out): a
        # direct publish refused for good is dead-lettered, recorded from it with its lateness.
        ended = arrival_record(message, FIRED, late_ms) if history else None
        return _direct(settings, message, where, ended), None
    expired = arrival_record(message, EXPIRED, late_ms, "expired") if history else None
    reason = (
        f"expired: due {late.total_seconds() * 1000:.0f} ms before it arrived, later than "
        f"{expiry_limit_text(own, settings)}"
    )
    if settings.expired_action == "dead-letter" and settings.dead_letter_topic:
        log.warning(
            "record %s (%s) dead-lettered: %s",
            message.id,
            where,
            reason,
            extra={"event": "dead_lettered", "reason": "expired", "source": where},
        )
        headers = cast(Headers | None, record.headers())
        # With what a replay needs to schedule it again (fired at once, to its topic).
        scheduled = scheduled_headers(
            message.id, message.deadline, message.target_topic, message.tenant
        )
        dead_letter = Pending(
            settings.dead_letter_topic,
            record.key(),
            record.value(),
            dead_letter_headers(headers, reason, where, "expired", scheduled),
            "dead_letter:expired",
            source=where,
            ended=expired,
        )
        return dead_letter, None
    metrics.DROPPED.labels("expired").inc()
    log.warning(
        "record %s (%s) dropped: %s",
        message.id,
        where,
        reason,
        extra={"event": "dropped", "reason": "expired", "source": where},
    )
    return None, expired


def _direct(
    settings: Settings, message: ScheduledMessage, where: str, ended: EndedOnArrival | None
) -> Pending:
    """The direct publish of a lapsed message to its topic (the relay headers added)."""
    return Pending(
        message.target_topic or settings.output_topic,
        message.key,
        message.value,
        relay_headers(
            message.headers,
            message.id,
            message.deadline.timestamp(),
            settings.relay_id_header,
            settings.relay_deadline_header,
        ),
        "direct",
        source=where,
        message=message,
        ended=ended,
    )
