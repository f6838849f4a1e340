"""The audit trail's writer: audit events (``chronos.observability.audit``) queued by the loop
that saw the outcome and produced to ``CHRONOS_AUDIT_TOPIC`` in batches, through the producer
that loop already has (no producer, round trip or flush of its own on the hot path).

Best effort, at least once: the audit never holds back what it describes. A fired record's
delivery is the contract; its audit record is produced after it, and one the broker refuses (the
topic missing, unauthorized, the broker away past the delivery timeout) is counted in
``chronos_audit_dropped_total{reason="refused"}`` and logged (once, then a reminder a minute
with a count), never retried and never a reason to keep a row. Records awaiting their report are
bounded (``MAX_OUTSTANDING``): past it, new ones are dropped (``reason="backlog"``) rather than
fill the producer's queue the real records need. An audit record repeats when its outcome does
(a message fired again after a failed delete).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial

from confluent_kafka import KafkaError

from chronos.config.settings import Settings
from chronos.kafka.clients import Publisher
from chronos.observability import metrics
from chronos.observability.audit import Event, encode

log = logging.getLogger(__name__)

MAX_OUTSTANDING = 20_000
"""Audit records produced and awaiting their delivery report, at most."""
REMINDER_INTERVAL = 60.0


class AuditTrail:
    """Queues audit events (``add``, any thread) and produces them (``write``, on the thread
    that polls ``publisher``)."""

    def __init__(
        self,
        publisher: Publisher,
        topic: str,
        monotonic: Callable[[], float] = time.monotonic,
        max_outstanding: int = MAX_OUTSTANDING,
    ):
        self.publisher = publisher
        self.topic = topic
        self.monotonic = monotonic
        self.max_outstanding = max_outstanding
        self.queued: list[Event] = []  # list.append and the swap in write are atomic
        self.outstanding = 0
        self._failing_since: float | None = None
        self._reminded_at = 0.0
        self._refused = 0  # since the last log line

    def add(self, event: Event) -> None:
        self.queued.append(event)

    def write(self) -> int:
        """Produce what is queued (no wait: the reports come with the publisher's next poll).
        Returns the number produced."""
        if not self.queued:
            return 0
        batch, self.queued = self.queued, []
        room = self.max_outstanding - self.outstanding
        if len(batch) > room:
            dropped = len(batch) - max(room, 0)
            batch = batch[: max(room, 0)]
            metrics.AUDIT_DROPPED.labels("backlog").inc(dropped)
            self._complain(f"{dropped} audit records dropped: {self.outstanding} await a report")
        produce, topic, report = self.publisher.produce, self.topic, self._report
        for event in batch:
            self.outstanding += 1
            key = event.get("id")
            produce(
                topic,
                key.encode() if isinstance(key, str) else None,
                encode(event),
                [],
                partial(report, str(event["event"])),
            )
        return len(batch)

    def _report(self, kind: str, err: KafkaError | None) -> None:
        self.outstanding -= 1
        if err is None:
            metrics.AUDIT_RECORDS.labels(kind).inc()
            if self._failing_since is not None:
                log.info(
                    "audit records are written to %s again",
                    self.topic,
                    extra={"event": "audit_recovered"},
                )
                self._failing_since = None
            return
        metrics.AUDIT_DROPPED.labels("refused").inc()
        self._refused += 1
        if self._failing_since is None:
            self._failing_since = self.monotonic()
        self._complain(f"audit records to {self.topic} refused ({err})")

    def _complain(self, text: str) -> None:
        now = self.monotonic()
        if self._reminded_at and now - self._reminded_at < REMINDER_INTERVAL:
            return
        self._reminded_at = now
        log.warning(
            "%s; %d refused since the last warning: firing goes on, the audit trail has gaps",
            text,
            self._refused,
            extra={"event": "audit_dropped"},
        )
        self._refused = 0


def audit_trail(settings: Settings, publisher: Publisher) -> AuditTrail | None:
    """The node's audit writer on ``publisher`` (None: ``CHRONOS_AUDIT_TOPIC`` is empty)."""
    return AuditTrail(publisher, settings.audit_topic) if settings.audit_topic else None
