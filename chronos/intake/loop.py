"""Consume-and-enqueue: input records -> table (or straight to the output topic when late).

One iteration handles one consumed batch:
1. parse every record (protocol); malformed ones are dead-lettered with a reason;
2. one statement inserts the batch (ids already waiting/ready are ignored) and tells which
   messages had already lapsed (deadline within the timing advance) and were unknown: those are
   published directly, bypassing the table, as the design says;
   The statement runs on a thread of its own while the next batch is consumed and parsed (one
   statement at a time, in consumed order: a batch's actions see every batch before it stored);
3. produce the direct publishes and dead letters, and go on consuming: their delivery reports
   are collected while the next batches are parsed and enqueued (a batch of late messages costs
   the loop no round trip to the broker, so intake does not slow down exactly when its input is
   late);
4. store a batch's offsets only once every record it published is confirmed, and in consumed
   order (a batch's offsets wait for the batches before it). The offsets are committed by the
   consumer in the background and synchronously at shutdown; a crash anywhere before step 4
   replays the batch: at-least-once, and idempotent on the message id.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from chronos.config.policy import dead_letter_after
from chronos.config.settings import Settings
from chronos.errors import StoreError
from chronos.intake.actions import ACTION_OUTCOMES, Folded, report
from chronos.intake.quarantine import HeaderProbe
from chronos.intake.records import Pending, Prepared, Unsettled, reduced, reporter
from chronos.kafka import Publisher, is_permanent
from chronos.kafka.consumer_lag import record_consumer_stats
from chronos.observability import metrics
from chronos.protocol import (
    Headers,
    Rejection,
    ScheduledMessage,
    dead_letter_headers,
    parse_record,
    topic_policy,
)
from chronos.runtime.faults import fault_point
from chronos.runtime.loop import Backoff, Loop
from chronos.store import Outcome, Store

log = logging.getLogger(__name__)

CLOCK_SYNC_S = 30.0
UNSETTLED_RECORDS_MAX = 20_000
"""Records produced and not yet confirmed before the loop waits for the oldest batch's reports
instead of consuming more (bounds memory and the replay after a crash)."""
UNSETTLED_BATCHES_MAX = 64


class IntakeLoop(Loop):
    name = "intake"

    def __init__(
        self,
        settings: Settings,
        store: Store,
        publisher: Publisher,
        consumer_factory: Callable[..., Consumer],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        super().__init__()
        self.settings = settings
        self.store = store
        self.publisher = publisher
        self.consumer_factory = consumer_factory
        self.clock = clock
        self.consumer: Consumer | None = None
        self.max_delay = (
            timedelta(milliseconds=settings.max_delay_ms) if settings.max_delay_ms else None
        )
        self.assigned: set[tuple[str, int]] = set()
        self.unsettled: deque[Unsettled] = deque()  # in consumed order
        self.unsettled_records = 0
        self.truncated: set[tuple[str, int]] = set()
        self.clock_offset = timedelta(0)
        self.clock_synced_at: float | None = None
        self.probe = HeaderProbe()
        self.topic_allowed = topic_policy(settings.output_topic, settings.allowed_topics)
        # The enqueue statement's thread (and so its own database connection): one at a time.
        self.enqueuer = ThreadPoolExecutor(1, thread_name_prefix="chronos-enqueue")
        self.in_flight: Prepared | None = None  # the batch whose statement is under way

    # -- lifecycle ---------------------------------------------------------------------------

    def run(self) -> None:
        consumer = self.consumer_factory(on_commit=self._on_commit, stats_cb=self._on_stats)
        self.consumer = consumer
        consumer.subscribe(
            [self.settings.input_topic], on_assign=self._on_assign, on_revoke=self._on_revoke
        )
        try:
            while not self.stopping.is_set():
                self.alive_at = time.monotonic()
                # While a statement is under way, take only what the consumer already holds (the
                # next batch is prepared meanwhile); never wait for more: the statement's batch
                # is completed (its direct publishes sent) as soon as it ends.
                wait = 0.0 if self.in_flight else min(0.5, self.settings.poll_interval_ms / 1000)
                records = consumer.consume(
                    num_messages=self.settings.consume_batch_size, timeout=wait
                )
                prepared = self.prepare(records) if records else None
                if self.finish_in_flight(consumer) and prepared is not None:
                    self.start(consumer, prepared)
                full = (
                    self.unsettled_records >= UNSETTLED_RECORDS_MAX
                    or len(self.unsettled) >= UNSETTLED_BATCHES_MAX
                )
                self.settle(consumer, block=full)
                if self.truncated:
                    self._rewind(consumer)
        finally:
            self._close(consumer)

    def _close(self, consumer: Consumer) -> None:
        self.finish_in_flight(consumer)
        self.enqueuer.shutdown(wait=True)
        self.settle(consumer, block=True)  # stopping: a batch still unconfirmed is replayed
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as exc:
            # Nothing stored since the last commit, or no assignment: both are fine.
            if exc.args and exc.args[0].code() != KafkaError._NO_OFFSET:
                log.warning("final offset commit failed: %s", exc)
        consumer.close()
        log.info("intake stopped", extra={"event": "intake_stopped"})

    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assigned |= {(p.topic, p.partition) for p in partitions}
        metrics.ASSIGNED_PARTITIONS.set(len(self.assigned))
        for p in partitions:
            metrics.ASSIGNED_PARTITION.labels(p.topic, str(p.partition)).set(1)
        log.info(
            "assigned %s",
            [f"{p.topic}[{p.partition}]" for p in partitions],
            extra={"event": "partitions_assigned"},
        )

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Finish the statement under way and confirm what was published first, so the offsets
        # of the partitions leaving are stored while they are still ours (their new owner
        # resumes after them, not before).
        self.finish_in_flight(consumer)
        self.settle(consumer, block=True)
        self.assigned -= {(p.topic, p.partition) for p in partitions}
        metrics.ASSIGNED_PARTITIONS.set(len(self.assigned))
        for p in partitions:
            with contextlib.suppress(KeyError):
                metrics.ASSIGNED_PARTITION.remove(p.topic, str(p.partition))
        log.info(
            "revoked %s",
            [f"{p.topic}[{p.partition}]" for p in partitions],
            extra={"event": "partitions_revoked"},
        )

    def database_now(self) -> datetime:
        """This node's clock corrected to the database clock (the one clock of Chronos), for the
        maximum-delay check. The offset is measured with one cheap query at most every
        CLOCK_SYNC_S, and only when a maximum delay is configured."""
        local = self.clock()
        if self.max_delay is None:
            return local
        if self.clock_synced_at is None or time.monotonic() - self.clock_synced_at > CLOCK_SYNC_S:
            try:
                before = self.clock()
                db_now = self.store.ping()
                after = self.clock()
                self.clock_offset = db_now - (before + (after - before) / 2)
                self.clock_synced_at = time.monotonic()
            except StoreError as exc:
                log.warning("could not read the database clock: %s", exc)
        return local + self.clock_offset

    def _on_stats(self, stats_json: str) -> None:
        """Consumer statistics: publish the lag, and notice a partition whose log now ends before
        our fetch position (its topic was recreated, or the broker lost its log): no record
        would ever arrive there again, so it is rewound to its beginning (at-least-once)."""
        record_consumer_stats(stats_json)
        try:
            topics = json.loads(stats_json).get("topics", {})
            for topic, info in topics.items():
                for key, part in info.get("partitions", {}).items():
                    partition = int(key)
                    if partition < 0 or (topic, partition) not in self.assigned:
                        continue
                    hi, fetch = part.get("hi_offset", -1), part.get("next_offset", -1)
                    if hi >= 0 and fetch > hi:
                        self.truncated.add((topic, partition))
        except (ValueError, TypeError, AttributeError) as exc:
            log.debug("unreadable consumer statistics: %s", exc)

    def _rewind(self, consumer: Consumer) -> None:
        self.finish_in_flight(consumer)
        self.settle(consumer, block=True)  # offsets read before the truncation first
        truncated, self.truncated = self.truncated, set()
        for topic, partition in sorted(truncated):
            if (topic, partition) not in self.assigned:
                continue
            log.warning(
                "partition %s[%d] now ends before the consumer's position (recreated or "
                "truncated log); reading it again from its beginning",
                topic,
                partition,
                extra={"event": "partition_rewound"},
            )
            try:
                consumer.seek(TopicPartition(topic, partition, OFFSET_BEGINNING))
            except KafkaException as exc:
                log.warning("rewind of %s[%d] failed: %s", topic, partition, exc)

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if err is not None and err.code() != KafkaError._NO_OFFSET:
            log.warning("offset commit failed: %s", err, extra={"event": "commit_failed"})

    # -- one batch ----------------------------------------------------------------------------

    def process_batch(self, consumer: Consumer | None, records: Sequence[Message]) -> bool:
        """Make one consumed batch durable, wait for its publishes, then store its offsets (and
        those of every batch before it). False if interrupted."""
        return self.submit(consumer, records) and self.settle(consumer, block=True)

    def submit(self, consumer: Consumer | None, records: Sequence[Message]) -> bool:
        """Make one consumed batch durable and produce its direct publishes and dead letters;
        its offsets are stored by ``settle`` once they are confirmed. False if interrupted."""
        prepared = self.prepare(records)
        if not self.finish_in_flight(consumer):
            return False
        self.start(consumer, prepared)
        return self.finish_in_flight(consumer)

    def prepare(self, records: Sequence[Message]) -> Prepared:
        """Probe and parse one consumed batch: the messages to store, the dead letters of the
        malformed records, the offsets (no database round trip)."""
        folded: Folded[tuple[Message, Headers | None]] = Folded()
        pending: list[Pending] = []
        offsets: dict[tuple[str, int], int] = {}
        now = self.database_now()
        consumed = duplicates = 0
        started = time.perf_counter()
        poison = {p.index: p.reason for p in self.probe.poison(records)}
        metrics.HEADER_PROBE_DURATION.observe(time.perf_counter() - started)
        for index, record in enumerate(records):
            err = record.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("consume error: %s", err, extra={"event": "consume_error"})
                continue
            topic = cast(str, record.topic())
            partition = cast(int, record.partition())
            offset = cast(int, record.offset())
            offsets[(topic, partition)] = max(offsets.get((topic, partition), -1), offset)
            consumed += 1
            if index in poison:  # never read its headers: that would crash this process
                metrics.QUARANTINED.inc()
                reason = f"{poison[index]}; its headers are left out of this dead letter"
                rejection = Rejection("unreadable_headers", reason)
                dl = self._dead_letter(record, None, rejection, f"{topic}/{partition}/{offset}")
                if dl is not None:
                    pending.append(dl)
                continue
            # A consumed record's headers are a list of (str, bytes | None) pairs, or None.
            headers = cast(Headers | None, record.headers())
            parsed = parse_record(
                record.key(),
                record.value(),
                headers,
                now=now,
                max_delay=self.max_delay,
                topic_allowed=self.topic_allowed,
                tenant_from_key=self.settings.tenant_from_key,
            )
            if isinstance(parsed, Rejection):
                dl = self._dead_letter(record, headers, parsed, f"{topic}/{partition}/{offset}")
                if dl is not None:
                    pending.append(dl)
                continue
            folded.add(parsed, (record, headers))
        return Prepared(folded, pending, offsets, consumed, duplicates + folded.duplicates)

    def start(self, consumer: Consumer | None, prepared: Prepared) -> None:
        """Start the batch's enqueue statement on the enqueue thread (nothing may be under way);
        a batch with nothing to store is completed at once."""
        assert self.in_flight is None, "one enqueue statement at a time"
        if not prepared.folded.messages:
            self._complete(consumer, prepared, [])
            return
        prepared.statement = self.enqueuer.submit(self._timed_enqueue, prepared.folded.messages)
        self.in_flight = prepared

    def finish_in_flight(self, consumer: Consumer | None) -> bool:
        """Wait for the statement under way (if any) and complete its batch. False if it was
        interrupted by a stop (the batch was not stored: it is replayed)."""
        prepared, self.in_flight = self.in_flight, None
        if prepared is None or prepared.statement is None:
            return True
        outcomes = prepared.statement.result()  # a statement's exception is raised here
        if outcomes is None:
            return False  # stopping before the batch was durable: it will be replayed
        fault_point("after_enqueue")
        self._complete(consumer, prepared, outcomes)
        return True

    def _timed_enqueue(self, messages: list[ScheduledMessage]) -> list[Outcome | str] | None:
        started = time.perf_counter()
        outcomes = self._enqueue(messages)
        if outcomes is not None:
            metrics.STATEMENT_DURATION.labels("enqueue").observe(time.perf_counter() - started)
        return outcomes

    def _complete(
        self, consumer: Consumer | None, prepared: Prepared, outcomes: list[Outcome | str]
    ) -> None:
        """A batch is durable: publish what it must publish, count it, and queue its offsets
        behind its publishes (``settle`` stores them)."""
        valid, sources = prepared.folded.messages, prepared.folded.sources
        pending, offsets = prepared.pending, prepared.offsets
        consumed, duplicates = prepared.consumed, prepared.duplicates
        if valid:
            metrics.BATCH_SIZE.labels("enqueue").observe(len(valid))
            enqueued = 0
            for message, source, outcome in zip(valid, sources, outcomes, strict=True):
                if isinstance(outcome, str):  # the database refused this message's data
                    record, headers = source
                    where = f"{record.topic()}/{record.partition()}/{record.offset()}"
                    dl = self._dead_letter(
                        record, headers, Rejection("database_refused", outcome), where
                    )
                    if dl is not None:
                        pending.append(dl)
                elif outcome is Outcome.INSERTED:
                    enqueued += 1
                elif outcome in ACTION_OUTCOMES:
                    continue  # counted and logged by report()
                elif outcome is Outcome.FIRE_NOW:
                    record = source[0]
                    pending.append(
                        Pending(
                            message.target_topic or self.settings.output_topic,
                            message.key,
                            message.value,
                            message.headers,
                            "direct",
                            source=f"{record.topic()}/{record.partition()}/{record.offset()}",
                        )
                    )
                else:
                    duplicates += 1
            metrics.ENQUEUED.inc(enqueued)
            report(valid, outcomes)
        metrics.CONSUMED.inc(consumed)
        if duplicates:
            metrics.DUPLICATES.inc(duplicates)

        if not pending and not self.unsettled:
            if consumer is not None and offsets:
                self._store_offsets(consumer, offsets)
            return
        self._produce_all(pending)
        produced = time.monotonic()
        give_up_at = produced + self.settings.dead_letter_timeout_ms / 1000
        self.unsettled.append(Unsettled(pending, offsets, produced, give_up_at))
        self.unsettled_records += len(pending)

    def settle(self, consumer: Consumer | None, *, block: bool) -> bool:
        """Serve delivery reports; store the offsets of the oldest batches whose publishes are
        all confirmed (retrying failures as ``_confirm`` does). Without ``block``, stop at the
        first batch still waiting for a report; with it, wait for them all. False if stopped
        while retrying (that batch and the ones after it are replayed)."""
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
            if not self._confirm(head.pending, head.produced_at, head.give_up_at):
                self.unsettled.clear()
                self.unsettled_records = 0
                return False
            self.unsettled.popleft()
            self.unsettled_records -= len(head.pending)
            if consumer is not None and head.offsets:
                self._store_offsets(consumer, head.offsets)
        return True

    def _report_wait(self) -> float:
        """Seconds a produced record's report may take before it counts as failed."""
        return self.settings.delivery_timeout_ms / 1000 + 5

    def _enqueue(self, messages: list[ScheduledMessage]) -> list[Outcome | str] | None:
        """Enqueue, retrying outages with backoff. If the database refuses the data itself, split
        the batch to isolate the poison: its outcome is the refusal (a string) and it goes to the
        dead-letter topic, so one bad record never stalls a partition. None if stopping."""
        backoff = Backoff()
        while True:
            try:
                return list(
                    self.store.enqueue(
                        messages, self.settings.timing_advance_ms, self.settings.cancel_ttl_ms
                    )
                )
            except StoreError as exc:
                metrics.DATABASE_ERRORS.labels("enqueue").inc()
                if not exc.retryable:
                    if len(messages) == 1:
                        return [f"rejected by the database: {exc}"[:500]]
                    middle = len(messages) // 2
                    left = self._enqueue(messages[:middle])
                    right = self._enqueue(messages[middle:]) if left is not None else None
                    return None if left is None or right is None else left + right
                delay = backoff.next_delay()
                log.warning(
                    "enqueue failed, retrying in %.2fs: %s",
                    delay,
                    exc,
                    extra={"event": "database_error", "operation": "enqueue"},
                )
                if self.wait(delay):
                    return None

    def _dead_letter(
        self, record: Message, headers: Headers | None, rejection: Rejection, source: str
    ) -> Pending | None:
        log.error(
            "malformed record at %s: %s",
            source,
            rejection.reason,
            extra={"event": "dead_lettered", "reason": rejection.code, "source": source},
        )
        if not self.settings.dead_letter_topic:
            metrics.DROPPED.labels(rejection.code).inc()
            return None
        return Pending(
            self.settings.dead_letter_topic,
            record.key(),
            record.value(),
            dead_letter_headers(headers, rejection.reason, source),
            "dead_letter:" + rejection.code,
            source=source,
        )

    def _produce_all(self, items: list[Pending]) -> None:
        for item in items:
            item.done, item.error = False, None
            self.publisher.produce(item.topic, item.key, item.value, item.headers, reporter(item))

    def _confirm(self, pending: list[Pending], produced_at: float, give_up_at: float) -> bool:
        """Wait for the reports of these produced records; retry failures with backoff until
        each is delivered, dead-lettered or (a refused dead letter past ``give_up_at``) parked.
        False if the loop was stopped meanwhile."""
        backoff = Backoff()
        todo = pending
        while todo:
            deadline = produced_at + self._report_wait()
            while any(not item.done for item in todo) and time.monotonic() < deadline:
                self.publisher.poll(0.05)
            failed = [item for item in todo if not item.done or item.error is not None]
            for item in todo:
                if item.done and item.error is None:
                    if item.kind == "direct":
                        metrics.PUBLISHED_DIRECTLY.inc()
                    else:
                        metrics.DEAD_LETTERED.labels(item.kind.split(":", 1)[1]).inc()
            failed = [r for r in (self._on_refusal(item) for item in failed) if r is not None]
            if time.monotonic() >= give_up_at:
                failed = [item for item in failed if not self._park(item)]
            if not failed:
                return True
            kind = "output" if failed[0].kind == "direct" else "dead_letter"
            metrics.PUBLISH_ERRORS.labels(kind).inc(len(failed))
            delay = backoff.next_delay()
            log.warning(
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
            return Pending(
                dead_letter,
                item.key,
                item.value,
                dead_letter_headers(item.headers, reason, item.source or item.topic),
                "dead_letter:publish_failed",
                source=item.source,
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

    def _store_offsets(self, consumer: Consumer, offsets: dict[tuple[str, int], int]) -> None:
        tps = [TopicPartition(t, p, o + 1) for (t, p), o in offsets.items()]
        try:
            consumer.store_offsets(offsets=tps)
        except KafkaException as exc:
            # The partition was revoked meanwhile: its new owner replays from the last commit.
            log.info("could not store offsets (rebalance?): %s", exc)
