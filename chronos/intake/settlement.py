"""What intake publishes itself (lapsed messages, dead letters) and when a batch's offsets may be
stored: only once every record it published is confirmed, and in consumed order (a batch's
offsets wait for the batches before it). A crash before then replays the batch.

A publish the broker refuses for good is retried, dead-lettered, reduced or parked as
``chronos.config.policy`` says; outages are retried with backoff. See docs/reliability.md.

The history records of what a batch ended without a row (its delivered publishes', completed with
their partition and offset, and its drops') are handed to ``record`` once per settle pass, for
all the batches the pass settled, after their offsets are stored (chronos.intake.history).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from chronos.config.policy import dead_letter_after
from chronos.config.settings import Settings
from chronos.intake.records import (
    Pending,
    Unsettled,
    carried,
    delivered_record,
    reduced,
    reporter,
)
from chronos.kafka import Publisher, is_permanent, is_refused_record
from chronos.observability import metrics
from chronos.observability.logs import Throttle
from chronos.protocol import Headers, Rejection, dead_letter_headers, scheduled_headers
from chronos.runtime.loop import Backoff
from chronos.store import EndedOnArrival, Ending
from chronos.store.history import DEAD_LETTERED

log = logging.getLogger("chronos.intake.loop")  # the intake loop's logger: one name for intake

REFUSED_RETRY_S = 0.05
"""The pause before a record the broker refused for good is produced again (or as a dead
letter): the back-off's first step, never doubled."""

UNSETTLED_RECORDS_MAX = 20_000
"""Records produced and not yet confirmed before the loop waits for the oldest batch's reports
instead of consuming more (bounds memory and the replay after a crash)."""
UNSETTLED_BATCHES_MAX = 64


def dead_letter(
    settings: Settings,
    record: Message,
    headers: Headers | None,
    rejection: Rejection,
    source: str,
) -> Pending | None:
    """The dead letter of a rejected input record (logged); None when there is no dead-letter
    topic (then it is counted as dropped)."""
    log.error(
        "malformed record at %s: %s",
        source,
        rejection.reason,
        extra={"event": "dead_lettered", "reason": rejection.code, "source": source},
    )
    if not settings.dead_letter_topic:
        metrics.DROPPED.labels(rejection.code).inc()
        return None
    return Pending(
        settings.dead_letter_topic,
        record.key(),
        record.value(),
        dead_letter_headers(headers, rejection.reason, source, rejection.code),
        "dead_letter:" + rejection.code,
        source=source,
    )


def store_offsets(consumer: Consumer, offsets: dict[tuple[str, int], int]) -> None:
    """Store the offsets after these (the consumer commits them in the background)."""
    tps = [TopicPartition(t, p, o + 1) for (t, p), o in offsets.items()]
    try:
        consumer.store_offsets(offsets=tps)
    except KafkaException as exc:
        # The partition was revoked meanwhile: its new owner replays from the last commit.
        log.info("could not store offsets (rebalance?): %s", exc)


class Settlement:
    """The consumed batches whose publishes are not all confirmed yet, in consumed order."""

    def __init__(
        self,
        settings: Settings,
        publisher: Publisher,
        wait: Callable[[float], bool],
        record: Callable[[list[EndedOnArrival]], None] = lambda ended: None,
    ) -> None:
        """``wait(seconds)``: the loop's interruptible sleep (True once it is stopping);
        ``record(ended)``: write the history records of a settle pass (never raises)."""
        self.settings = settings
        self.publisher = publisher
        self.wait = wait
        self.record = record
        self.unsettled: deque[Unsettled] = deque()  # in consumed order
        self.failures = Throttle()  # a broker away repeats them: one line a minute
        self.unsettled_records = 0
        # (topic, partition) -> the offset after the last record made durable (see resume.py)
        self.durable: dict[tuple[str, int], int] = {}

    def full(self) -> bool:
        """Enough is unconfirmed that the loop should wait for reports before consuming more."""
        return (
            self.unsettled_records >= UNSETTLED_RECORDS_MAX
            or len(self.unsettled) >= UNSETTLED_BATCHES_MAX
        )

    def add(
        self,
        consumer: Consumer | None,
        pending: list[Pending],
        offsets: dict[tuple[str, int], int],
        dropped: list[EndedOnArrival] | None = None,
    ) -> None:
        """A durable batch: produce what it must publish and queue its offsets behind those
        publishes (stored at once when it publishes nothing and nothing is queued before it).
        ``dropped``: the history records of the messages it ended without publishing them,
        recorded when it settles."""
        if not pending and not self.unsettled:
            if consumer is not None and offsets:
                self._store(consumer, offsets)
            if dropped:
                self.record(dropped)
            return
        self._produce_all(pending)
        produced = time.monotonic()
        give_up_at = produced + self.settings.dead_letter_timeout_ms / 1000
        self.unsettled.append(Unsettled(pending, offsets, produced, give_up_at, dropped or []))
        self.unsettled_records += len(pending)

    def settle(self, consumer: Consumer | None, *, block: bool) -> bool:
        """Serve delivery reports; store the offsets of the oldest batches whose publishes are
        all confirmed (retrying failures as ``_confirm`` does), then hand their history records
        to ``record`` at once. Without ``block``, stop at the first batch still waiting for a
        report; with it, wait for them all. False if stopped while retrying (that batch and the
        ones after it are replayed)."""
        ended: list[EndedOnArrival] = []
        try:
            return self._settle(consumer, block, ended)
        finally:
            if ended:
                self.record(ended)

    def _settle(self, consumer: Consumer | None, block: bool, ended: list[EndedOnArrival]) -> bool:
        if self.unsettled:
            self.publisher.poll(0)
        while self.unsettled:
            head = self.unsettled[0]
            if (
                not block
                and any(not item.done for item in head.pending)
                and time.monotonic() < head.produced_at + self._report_wait()
            ):
                return True
            delivered: list[Pending] = []
            if not self._confirm(head.pending, head.produced_at, head.give_up_at, delivered):
                self.unsettled.clear()
                self.unsettled_records = 0
                return False
            self.unsettled.popleft()
            self.unsettled_records -= len(head.pending)
            if consumer is not None and head.offsets:
                self._store(consumer, head.offsets)
            ended.extend(head.dropped)
            ended.extend(r for r in map(delivered_record, delivered) if r is not None)
        return True

    def forget(self, partitions: list[TopicPartition]) -> None:
        """Partitions handed over: what was made durable in them is no longer where they resume
        (their next owner moves the group's commit on; a topic deleted and created again
        meanwhile starts a new log at 0), so it is never sought back to (resume.py)."""
        for p in partitions:
            self.durable.pop((p.topic, p.partition), None)

    def _store(self, consumer: Consumer, offsets: dict[tuple[str, int], int]) -> None:
        self.durable.update({tp: o + 1 for tp, o in offsets.items()})
        store_offsets(consumer, offsets)

    def _report_wait(self) -> float:
        """Seconds a produced record's report may take before it counts as failed."""
        return self.settings.delivery_timeout_ms / 1000 + 5

    def _produce_all(self, items: list[Pending]) -> None:
        publisher = self.publisher
        for item in items:
            item.done, item.error, item.position = False, None, None
            report = reporter(item, publisher)
            publisher.produce(item.topic, item.key, item.value, item.headers, report)

    def _confirm(
        self,
        pending: list[Pending],
        produced_at: float,
        give_up_at: float,
        delivered: list[Pending],
    ) -> bool:
        """Wait for the reports of these produced records; retry failures with backoff until
        each is delivered (added to ``delivered``: a record that replaced a refused one too),
        dead-lettered or (a refused dead letter past ``give_up_at``) parked. False if the loop
        was stopped meanwhile."""
        backoff = Backoff()
        todo = pending
        while todo:
            deadline = produced_at + self._report_wait()
            while any(not item.done for item in todo) and time.monotonic() < deadline:
                self.publisher.poll(0.05)
            failed = [item for item in todo if not item.done or item.error is not None]
            for item in todo:
                if item.done and item.error is None:
                    delivered.append(item)
                    if item.kind == "direct":
                        metrics.PUBLISHED_DIRECTLY.inc()
                    else:
                        metrics.DEAD_LETTERED.labels(item.kind.split(":", 1)[1]).inc()
            # Refusals of the records themselves only (e.g. too large): waiting changes nothing,
            # so they go again at once, not after a back-off doubling with each refusal while
            # the partition waits (ten of them: 12 s); an outage, or a topic refused, backs off.
            refused = all(item.done and is_refused_record(item.error) for item in failed)
            failed = [r for r in (self._on_refusal(item) for item in failed) if r is not None]
            if time.monotonic() >= give_up_at:
                failed = [item for item in failed if not self._park(item)]
            if not failed:
                return True
            kind = "output" if failed[0].kind == "direct" else "dead_letter"
            metrics.PUBLISH_ERRORS.labels(kind).inc(len(failed))
            delay = REFUSED_RETRY_S if refused else backoff.next_delay()
            log.log(
                self.failures.level(),
                "%d direct/dead-letter publishes failed (%s); retrying in %.2fs",
                len(failed),
                failed[0].error,
                delay,
                extra={"event": "publish_failed"},
            )
            if self.wait(delay):
                return False  # offsets not stored: the batch is replayed after restart
            todo = failed
            self._produce_all(todo)
            produced_at = time.monotonic()
        return True

    def _on_refusal(self, item: Pending) -> Pending | None:
        """What to retry after a failed publish. Outages: the same record. A record the broker
        refuses for good (e.g. too large), max_publish_attempts times:

        * a direct publish goes to the dead-letter topic with the broker's error;
        * a dead-letter record goes again as a *reduced* dead letter — the value and any large
          header left out, their sizes and the input record's topic/partition/offset given
          instead — so the reason always reaches the dead-letter topic and the original can be
          read back from the input topic;
        * only if even that is refused is it logged, counted and given up, so that one record
          never stalls the partition.
        """
        if not is_permanent(item.error):
            return item
        item.refusals += 1
        if item.refusals < dead_letter_after(self.settings):
            return item
        dead_letter = self.settings.dead_letter_topic
        if item.kind == "direct" and dead_letter:
            reason = f"publishing to {item.topic} failed {item.refusals} times: {item.error}"
            log.error(
                "lapsed message refused by %s; dead-lettering it: %s",
                item.topic,
                item.error,
                extra={"event": "dead_lettered", "reason": "publish_failed"},
            )
            headers, scheduled = item.headers, []
            if item.message is not None:  # its own headers (no relayed id) and what a replay needs
                m = item.message
                headers = m.headers
                scheduled = scheduled_headers(m.id, m.deadline, m.target_topic, m.tenant)
            ended = carried(item)
            if ended is not None:  # dead-lettered, as the firing path records it
                late = ended.ending.lateness_ms
                ended = ended._replace(
                    ending=Ending(DEAD_LETTERED, None, None, None, late, "publish_failed")
                )
            return Pending(
                dead_letter,
                item.key,
                item.value,
                dead_letter_headers(
                    headers, reason, item.source or item.topic, "publish_failed", scheduled
                ),
                "dead_letter:publish_failed",
                source=item.source,
                ended=ended,
            )
        if item.kind.startswith("dead_letter:") and dead_letter:
            log.error(
                "dead-letter record refused by the broker (%s); sending a reduced one",
                item.error,
                extra={"event": "dead_lettered", "reason": "reduced"},
            )
            return reduced(item, dead_letter)
        metrics.DROPPED.labels("publish_refused").inc()
        log.error(
            "the broker refuses record for %s for good (%s); giving up on it (input record %s)",
            item.topic,
            item.error,
            item.source or "unknown",
            extra={"event": "dropped", "reason": "publish_refused", "source": item.source},
        )
        return None

    def _park(self, item: Pending) -> bool:
        """A dead letter the broker has refused for longer than ``dead_letter_timeout_ms`` (e.g.
        no write access to the topic, or the topic was deleted): give up on it so that the
        partition moves on, loudly — the input record stays in the input topic at the logged
        topic/partition/offset, to be read again once the dead-letter topic accepts writes.
        Direct publishes to the output topic are never parked: without the output topic
        nothing can fire, and retrying them is the only way to deliver. True if parked."""
        if item.kind == "direct":
            return False
        metrics.PARKED_INPUT.inc()
        log.error(
            "the dead-letter topic %s refused the dead letter of input record %s for more than "
            "%d ms (%s); parking the record: it is skipped, and stays in the input topic at %s",
            item.topic,
            item.source or "unknown",
            self.settings.dead_letter_timeout_ms,
            item.error,
            item.source or "unknown",
            extra={"event": "input_parked", "source": item.source, "reason": item.kind},
        )
        return True
