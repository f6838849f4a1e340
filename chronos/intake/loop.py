"""Consume-and-enqueue: input records -> table (or straight to the output topic when late).

One iteration handles one consumed batch:
1. parse every record (protocol); malformed ones are dead-lettered with a reason;
2. one statement inserts the batch (ids already waiting/ready are ignored) and tells which
   messages had already lapsed (deadline within the timing advance) and were unknown: those are
   published directly, bypassing the table, as the design says;
   The statement runs on a thread of its own while the next batch is consumed and parsed (one
   statement at a time, in consumed order: a batch's actions see every batch before it stored);
3. produce the direct publishes and dead letters (``lapsed``: a message past its expiry is
   never published late), and go on consuming: their delivery reports are collected while the
   next batches are parsed and enqueued (a batch of late messages costs the loop no round trip to
   the broker, so intake does not slow down exactly when its input is late);
4. store a batch's offsets only once every record it published is confirmed, and in consumed
   order (a batch's offsets wait for the batches before it). The consumer commits them in the
   background and synchronously at shutdown; a crash before step 4 replays the batch:
   at-least-once, and idempotent on the message id. Then the history records of what it ended
   without storing it are written (``history``: one store call per settle pass, on the enqueue
   thread).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import cast

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from chronos.config.policy import refused_topics
from chronos.config.settings import Settings
from chronos.config.shards import ShardMap
from chronos.errors import StoreError
from chronos.intake.actions import ACTION_OUTCOMES, Folded, audit_actions, report
from chronos.intake.history import ArrivalHistory, refused_record
from chronos.intake.lapsed import on_arrival
from chronos.intake.partitions.gaps import OffsetGaps
from chronos.intake.partitions.resume import resume_after_durable
from chronos.intake.partitions.shards import Deferred, ShardAway, ShardRouter
from chronos.intake.partitions.warmth import warm_if_joined_without_partitions
from chronos.intake.quarantine import HeaderProbe
from chronos.intake.records import Pending, Prepared, position
from chronos.intake.settlement import Settlement, dead_letter
from chronos.kafka import Publisher
from chronos.kafka.audit import audit_trail
from chronos.kafka.consumer_lag import record_consumer_stats
from chronos.observability import metrics
from chronos.observability.dependencies import KAFKA
from chronos.observability.logs import Throttle
from chronos.protocol import Headers, Rejection, ScheduledMessage, parse_record, topic_policy
from chronos.runtime.faults import fault_point
from chronos.runtime.loop import Backoff, Loop
from chronos.store import EndedOnArrival, Outcome, Store

log = logging.getLogger(__name__)

CLOCK_SYNC_S = 30.0


class IntakeLoop(Loop):
    name = "intake"
    cold_start = True  # warm at its first group assignment (even an empty one)

    def __init__(
        self,
        settings: Settings,
        store: Store,
        publisher: Publisher,
        consumer_factory: Callable[..., Consumer],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        *,
        shards: Sequence[Store] = (),
        shard_map: ShardMap | None = None,
    ):
        super().__init__()
        self.settings = settings
        self.store = store  # shard 0's: the database clock, the records ended on arrival
        # Every shard's store, shard 0 first: a batch's messages go to their partition's shard,
        # and a shard away holds its own partitions only (docs/shards.md). One: ``store``.
        stores = shards or (store,)
        self.router = ShardRouter(
            stores,
            shard_map or ShardMap(len(stores)),
            settings.input_topic,
            on_seek=lambda partitions: self.gaps.forget(partitions),
        )
        self.publisher = publisher
        self.consumer_factory = consumer_factory
        self.clock = clock
        self.consumer: Consumer | None = None
        self.max_delay = (
            timedelta(milliseconds=settings.max_delay_ms) if settings.max_delay_ms else None
        )
        self.max_lateness = (
            timedelta(milliseconds=settings.max_lateness_ms) if settings.max_lateness_ms else None
        )
        self.assigned: set[tuple[str, int]] = set()
        # The enqueue statement's thread (and so its own database connection): one at a time;
        # the history records of what intake ends without storing it are written there too.
        self.enqueuer = ThreadPoolExecutor(1, thread_name_prefix="chronos-enqueue")
        self.history = ArrivalHistory(
            settings, store, self.enqueuer, away=lambda: 0 in self.router.away
        )
        self.settlement = Settlement(settings, publisher, self.wait, self.history.write)
        self.audit, self.node = audit_trail(settings, publisher), settings.node_id
        self.clock_offset = timedelta(0)
        self.clock_synced_at: float | None = None
        self.probe = HeaderProbe(wait=self.wait, inline=settings.header_probe == "inline")
        self.gaps = OffsetGaps()  # a fetch that skipped records: read them again
        self.topic_allowed = topic_policy(
            settings.output_topic,
            settings.allowed_topics,
            refused=refused_topics(settings),
        )
        self.in_flight: Prepared | None = None  # the batch whose statement is under way
        self.consume_errors, self.commit_failures = Throttle(), Throttle()  # a line a minute

    # -- lifecycle ---------------------------------------------------------------------------

    def run(self) -> None:
        consumer = self.consumer_factory(on_commit=self._on_commit, stats_cb=self._on_stats)
        self.consumer = consumer
        consumer.subscribe(
            [self.settings.input_topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        try:
            while not self.stopping.is_set():
                self.alive_at = time.monotonic()
                # While a statement is under way, take only what the consumer already holds (the
                # next batch is prepared meanwhile); never wait for more: the statement's batch
                # is completed (its direct publishes sent) as soon as it ends.
                wait = 0.0 if self.in_flight else min(0.5, self.settings.poll_interval_ms / 1000)
                wait = self.gaps.reread_due(consumer, wait)  # gaps read again once settled
                records = consumer.consume(
                    num_messages=self.settings.consume_batch_size, timeout=wait
                )
                if records:
                    records = self.gaps.check(consumer, records)
                prepared = self.prepare(records) if records else None
                if self.finish_in_flight(consumer) and prepared is not None:
                    self.start(consumer, prepared)
                self.settle(consumer, block=self.settlement.full())
                self.router.tick(consumer)  # a shard away: resume its partitions once back
        finally:
            self._close(consumer)

    def _close(self, consumer: Consumer) -> None:
        self.finish_in_flight(consumer)
        self.settle(consumer, block=True)  # stopping: a batch still unconfirmed is replayed
        self.enqueuer.shutdown(wait=True)  # after the history records that settled
        self.router.close()
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as exc:
            # Nothing stored since the last commit, or no assignment: both are fine.
            if exc.args and exc.args[0].code() != KafkaError._NO_OFFSET:
                log.warning("final offset commit failed: %s", exc)
        consumer.close()
        log.info("intake stopped", extra={"event": "intake_stopped"})

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        resume_after_durable(consumer, partitions, self.settlement.durable, self.settings)
        self.assigned |= {(p.topic, p.partition) for p in partitions}
        self.gaps.forget((p.topic, p.partition) for p in partitions)
        metrics.ASSIGNED_PARTITIONS.set(len(self.assigned))
        for p in partitions:
            metrics.ASSIGNED_PARTITION.labels(p.topic, str(p.partition)).set(1)
        names = [f"{p.topic}[{p.partition}]" for p in partitions]
        log.info("assigned %s", names, extra={"event": "partitions_assigned"})
        self.warm.set()  # the group is joined: records are consumed as they come

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Handed over: their offsets are stored (and committed by the client as they go), then
        forgotten here; they come back at the group's commit."""
        self._release(consumer, partitions, "revoked")
        self.settlement.forget(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Lost (the session ended: its coordinator's broker died, say), so commits may have
        failed since: what was made durable in them is kept to resume after it (resume.py)."""
        self._release(consumer, partitions, "lost")

    def _release(self, consumer: Consumer, partitions: list[TopicPartition], how: str) -> None:
        # Finish the statement and confirm what was published first: the leaving partitions'
        # offsets are stored while still ours (their new owner resumes after them).
        self.finish_in_flight(consumer)
        self.settle(consumer, block=True)
        self.assigned -= {(p.topic, p.partition) for p in partitions}
        self.gaps.forget((p.topic, p.partition) for p in partitions)
        self.router.forget(consumer, partitions)
        metrics.ASSIGNED_PARTITIONS.set(len(self.assigned))
        for p in partitions:
            metrics.remove_series(metrics.ASSIGNED_PARTITION, p.topic, str(p.partition))
        log.info(
            "%s %s",
            how,
            [f"{p.topic}[{p.partition}]" for p in partitions],
            extra={"event": f"partitions_{how}"},
        )

    def database_now(self, needed: bool = False) -> datetime:
        """This node's clock corrected to the database clock (the one clock of Chronos), for the
        maximum-delay and maximum-lateness checks. The offset is measured with one cheap query
        at most every CLOCK_SYNC_S, and only when either maximum is configured (or ``needed``:
        a message names its own expiry)."""
        local = self.clock()
        if self.max_delay is None and self.max_lateness is None and not needed:
            return local
        if self.clock_synced_at is None or time.monotonic() - self.clock_synced_at > CLOCK_SYNC_S:
            try:
                before = self.clock()
                db_now = self.store.ping()
                after = self.clock()
                self.clock_offset = db_now - (before + (after - before) / 2)
                self.clock_synced_at = time.monotonic()
            except StoreError as exc:
                log.log(exc.log_level, "could not read the database clock: %s", exc)
                # Again in a second, not at every batch (shard 0 away: the others flow on).
                self.clock_synced_at = time.monotonic() - CLOCK_SYNC_S + 1.0
        return local + self.clock_offset

    def _on_stats(self, stats_json: str) -> None:
        """Consumer statistics: publish the lag and tell a member left without partitions
        (warmth). A partition whose log now ends before the fetch position (topic recreated,
        records deleted) needs nothing here: the broker answers the fetch with "offset out of
        range" and the consumer resets to the log's start (``auto.offset.reset=earliest``,
        counted by ``chronos_offsets_out_of_range_total``). The statistics' high watermark is
        no sign of it: a partition's new leader reports one below the old leader's until its
        followers' next fetch."""
        record_consumer_stats(stats_json)
        warm_if_joined_without_partitions(stats_json, self.settings.group_protocol, self.warm)

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if err is not None and err.code() != KafkaError._NO_OFFSET:
            level = self.commit_failures.level()
            log.log(level, "offset commit failed: %s", err, extra={"event": "commit_failed"})

    # -- one batch ----------------------------------------------------------------------------

    def process_batch(self, consumer: Consumer | None, records: Sequence[Message]) -> bool:
        """Make one consumed batch durable, wait for its publishes, then store its offsets (and
        those of every batch before it). False if interrupted."""
        return self.submit(consumer, records) and self.settle(consumer, block=True)

    def submit(self, consumer: Consumer | None, records: Sequence[Message]) -> bool:
        """Make one consumed batch durable and produce its direct publishes and dead letters;
        its offsets are stored by ``settle`` once they are confirmed. False if interrupted."""
        prepared = self.prepare(records)
        if prepared is None or not self.finish_in_flight(consumer):
            return False
        self.start(consumer, prepared)
        return self.finish_in_flight(consumer)

    def prepare(self, records: Sequence[Message]) -> Prepared | None:
        """Probe and parse one consumed batch: the messages to store, the dead letters of the
        malformed records, the offsets (no database round trip). None if the loop was stopped
        while the probe waited to be retried (the batch is not stored: it is replayed)."""
        folded: Folded[tuple[Message, Headers | None]] = Folded()
        pending: list[Pending] = []
        offsets: dict[tuple[str, int], int] = {}
        firsts: dict[tuple[str, int], int] = {}  # each partition's first record in the batch
        now = self.database_now()
        consumed = duplicates = 0
        started = time.perf_counter()
        found = self.probe.poison(records)
        if found is None:
            return None
        poison = {p.index: p.reason for p in found}
        metrics.HEADER_PROBE_DURATION.observe(time.perf_counter() - started)
        for index, record in enumerate(records):
            err = record.error()
            if err is not None:
                if err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
                    KAFKA.failed(err)
                if err.code() != KafkaError._PARTITION_EOF:
                    log.log(
                        self.consume_errors.level(),
                        "consume error: %s",
                        err,
                        extra={"event": "consume_error"},
                    )
                continue
            topic = cast(str, record.topic())
            partition = cast(int, record.partition())
            offset = cast(int, record.offset())
            offsets[(topic, partition)] = max(offsets.get((topic, partition), -1), offset)
            firsts.setdefault((topic, partition), offset)
            consumed += 1
            if index in poison:  # never read its headers: that would crash this process
                metrics.QUARANTINED.inc()
                reason = f"{poison[index]}; its headers are left out of this dead letter"
                rejection = Rejection("unreadable_headers", reason)
                dl = dead_letter(
                    self.settings, record, None, rejection, f"{topic}/{partition}/{offset}"
                )
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
                dl = dead_letter(
                    self.settings, record, headers, parsed, f"{topic}/{partition}/{offset}"
                )
                if dl is not None:
                    pending.append(dl)
                continue
            folded.add(parsed, (record, headers))
        if consumed:
            KAFKA.succeeded()  # records came from the broker
        prepared = Prepared(folded, pending, offsets, consumed, duplicates + folded.duplicates)
        prepared.firsts, prepared.batch = firsts, self.router.next_batch()
        return prepared

    def start(self, consumer: Consumer | None, prepared: Prepared) -> None:
        """Start the batch's enqueue statement on the enqueue thread (nothing may be under way);
        a batch with nothing to store is completed at once."""
        assert self.in_flight is None, "one enqueue statement at a time"
        if not prepared.folded.messages:
            self._complete(consumer, prepared, [])
            return
        partitions = [cast(int, record.partition()) for record, _ in prepared.folded.sources]
        prepared.statement = self.enqueuer.submit(
            self._timed_enqueue, prepared.folded.messages, partitions
        )
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

    def _timed_enqueue(
        self, messages: list[ScheduledMessage], partitions: list[int]
    ) -> list[Outcome | str | Deferred] | None:
        started = time.perf_counter()
        outcomes: list[Outcome | str | Deferred] | None
        if self.router.several:
            outcomes = self.router.route(messages, partitions, self._enqueue)
        else:  # one database: its outages are waited out, as ever
            found = self._enqueue(messages, self.store, True, partitions)
            outcomes = None if found is None else list(found)
        if outcomes is not None:
            metrics.STATEMENT_DURATION.labels("enqueue").observe(time.perf_counter() - started)
        return outcomes

    def _complete(
        self,
        consumer: Consumer | None,
        prepared: Prepared,
        outcomes: Sequence[Outcome | str | Deferred],
    ) -> None:
        """A batch is durable: publish what it must publish, count it, and queue its offsets
        behind its publishes (``settle`` stores them)."""
        valid, sources = prepared.folded.messages, prepared.folded.sources
        kept = [i for i, o in enumerate(outcomes) if not isinstance(o, Deferred)]
        deferred = {  # their shard was away: their partitions are read again later
            cast(int, sources[i][0].partition()) for i in set(range(len(outcomes))) - set(kept)
        }
        valid, sources = [valid[i] for i in kept], [sources[i] for i in kept]
        done = [o for o in outcomes if not isinstance(o, Deferred)]
        pending, offsets = prepared.pending, prepared.offsets
        self.router.hold(
            consumer, prepared.batch, prepared.firsts, offsets, deferred, self.assigned
        )
        consumed, duplicates = prepared.consumed, prepared.duplicates
        dropped: list[EndedOnArrival] = []  # history records of what it ends unpublished
        if valid:
            metrics.BATCH_SIZE.labels("enqueue").observe(len(valid))
            enqueued = 0
            for message, source, outcome in zip(valid, sources, done, strict=True):
                if isinstance(outcome, str):  # the database refused this message's data
                    rejection = Rejection("database_refused", outcome)
                    record, headers = source
                    dl = dead_letter(self.settings, record, headers, rejection, position(source))
                    ended = refused_record(message) if self.history.on else None
                    if dl is not None:
                        dl.ended = ended
                        pending.append(dl)
                    elif ended is not None:
                        dropped.append(ended)
                elif outcome is Outcome.INSERTED:
                    enqueued += 1
                elif outcome in ACTION_OUTCOMES:
                    continue  # counted and logged by report()
                elif outcome is Outcome.FIRE_NOW:
                    publish, ended = on_arrival(
                        self.settings, message, source[0], self.database_now
                    )
                    if publish is not None:
                        pending.append(publish)
                    elif ended is not None:
                        dropped.append(ended)
                else:
                    duplicates += 1
            metrics.ENQUEUED.inc(enqueued)
            report(valid, done)
            if self.audit is not None:
                audit_actions(self.audit, self.node, valid, sources, done, position)
        metrics.CONSUMED.inc(consumed)
        if duplicates:
            metrics.DUPLICATES.inc(duplicates)

        self.settlement.add(consumer, pending, offsets, dropped)

    def settle(self, consumer: Consumer | None, *, block: bool) -> bool:
        """Store the offsets of the oldest batches whose publishes are all confirmed (see
        ``Settlement.settle``). False if stopped while retrying."""
        return self.settlement.settle(consumer, block=block)

    def _enqueue(
        self,
        messages: list[ScheduledMessage],
        store: Store,
        patient: bool = True,
        partitions: list[int] | None = None,
    ) -> list[Outcome | str] | None:
        """Enqueue, retrying outages with backoff. If the database refuses the data itself, split
        the batch to isolate the poison: its outcome is the refusal (a string) and it goes to the
        dead-letter topic, so one bad record never stalls a partition. None if stopping. Not
        ``patient`` (one shard of several), a database that cannot be reached raises ShardAway
        instead: the other shards' messages go on (``chronos.intake.partitions.shards``), and
        the messages' ``partitions`` are fenced: a partition being moved comes back MOVING."""
        backoff = Backoff()
        while True:
            try:
                return list(
                    store.enqueue(
                        messages,
                        self.settings.timing_advance_ms,
                        self.settings.cancel_ttl_ms,
                        # Flow control holds what arrives due: paused, limited or paced
                        # records are stored and wait, never published straight away.
                        output_topic=self.settings.output_topic,
                        catchup_after_ms=(
                            self.settings.catchup_after_ms if self.settings.catchup_rate else None
                        ),
                        partitions=partitions,
                        fenced=not patient,
                    )
                )
            except StoreError as exc:
                metrics.DATABASE_ERRORS.labels("enqueue").inc()
                if exc.outage and not patient:
                    raise ShardAway(str(exc)) from exc
                if not exc.retryable:
                    if len(messages) == 1:
                        return [f"rejected by the database: {exc}"[:500]]
                    middle = len(messages) // 2
                    halves = (
                        (None, None)
                        if partitions is None
                        else (partitions[:middle], partitions[middle:])
                    )
                    left = self._enqueue(messages[:middle], store, patient, halves[0])
                    right = (
                        self._enqueue(messages[middle:], store, patient, halves[1])
                        if left is not None
                        else None
                    )
                    return None if left is None or right is None else left + right
                delay = backoff.next_delay()
                log.log(
                    exc.log_level,
                    "enqueue failed, retrying in %.2fs: %s",
                    delay,
                    exc,
                    extra={"event": "database_error", "operation": "enqueue"},
                )
                if self.wait(delay):
                    return None
