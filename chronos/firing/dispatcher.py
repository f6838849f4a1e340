"""The dispatcher: the thread that fires claimed rows from in-memory timers on time (earliest
deadline first) and collects their delivery outcomes for the firing loop (chronos.firing.loop)."""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

from confluent_kafka import KafkaError

from chronos.cluster.leadership import Leadership
from chronos.config.policy import (
    expiry_limit_ms,
    expiry_limit_text,
    refused_topics,
    should_dead_letter,
)
from chronos.config.settings import Settings
from chronos.kafka import Publisher
from chronos.kafka.audit import audit_trail
from chronos.observability import audit, metrics
from chronos.protocol import dead_letter_headers, relay_headers, scheduled_headers
from chronos.recurrence import COUNT_LIMIT, decode
from chronos.runtime.faults import fault_point
from chronos.store import ClaimedRow, row_bytes

log = logging.getLogger(__name__)

_KEY, _AFTER_HEADERS = 3, 6  # a row's key, value and headers, which _produce lets go of:
assert ClaimedRow._fields[_KEY:_AFTER_HEADERS] == ("key", "value", "headers")
_NEW_ROW = tuple.__new__  # a row without them, built as a tuple (a third of _replace's cost)

COUNT_BUDGET_SHARE = 0.02
"""The share of the hold time one claimed batch may spend counting its series' missed
occurrences one by one (at most COUNT_LIMIT a series); past it, the batch's other series estimate
theirs from their rule's period, in a few steps each: a batch of series far behind (imported with
their original start) is timed in a fraction of the hold time, never given back for taking too
long."""


@dataclass(slots=True)
class Timer:
    """A claimed row in this node's hands (never compared: the heap orders ``Entry`` tuples)."""

    row: ClaimedRow
    size: int  # the row's bytes as the byte budget counts them (row_bytes), taken at claim
    dead_letter: bool = False  # sent to the dead-letter topic (or dropped): never "fired"
    lateness: float = 0.0  # seconds, taken when produced
    reason: str = ""  # why it was dead-lettered: "publish_failed", "expired", "topic_not_allowed"
    next_deadline: datetime | None = None  # a series' next occurrence (None: delete the row)
    skipped: int = 0  # missed occurrences of a series this fire skips (chronosMissed: latest)
    estimated: bool = False  # ``skipped`` is partly estimated (more than were counted)
    held_until: float = 0.0  # monotonic: past it a peer may have taken the claim over (see add)
    position: tuple[int, int] | None = None  # the delivered record's (partition, offset)


Entry = tuple[float, int, Timer]
"""A heap entry: (fire_at on the monotonic clock, sequence number, timer); the sequence number
is unique, so tuples compare on floats and ints only."""


class Dispatcher:
    """Fires timers on time and collects delivery outcomes. Runs on its own thread."""

    def __init__(
        self,
        settings: Settings,
        publisher: Publisher,
        leadership: Leadership,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.settings = settings
        self.publisher = publisher
        self.leadership = leadership
        self.monotonic = monotonic
        self.hold = settings.hold_time_ms / 1000
        self.output_topic = settings.output_topic
        self.refused = frozenset(refused_topics(settings))  # never fired to (see _produce)
        self.cond = threading.Condition()
        self.timers: list[Entry] = []  # a heap, guarded by cond
        # The timers not fired yet, per tenant (guarded by cond): a tenant's queue ahead of
        # the others' rows (chronos.firing.tenant_share).
        self.unfired: Counter[str] = Counter()
        self.in_flight = 0  # produced, report pending (dispatcher thread only)
        # When the deliveries last made progress (monotonic): a record delivered, or the first
        # record produced while none was in flight. Read by the firing loop (stalled_for).
        self.progress_at = self.monotonic()
        self.delivered: list[Timer] = []  # guarded by cond
        self.failed: list[tuple[Timer, KafkaError | None]] = []  # guarded by cond
        self.expired: list[Timer] = []  # guarded by cond
        self.outcome_ready = threading.Event()
        self.stopping = threading.Event()
        self.alive_at = time.monotonic()  # start of the latest dispatcher iteration (liveness)
        self._seq = 0
        # The audit trail (CHRONOS_AUDIT_TOPIC): events queued by the delivery reports, produced
        # by this thread after each poll, on this producer.
        self.audit = audit_trail(settings, publisher)
        self.node_id = settings.node_id

    # -- called from the loop thread ------------------------------------------------------

    def add(self, rows: list[ClaimedRow], sent_at: float | None = None) -> int:
        """Set a timer for each row; returns the rows' bytes (``row_bytes``, summed).

        ``sent_at`` is when the claim statement was sent (monotonic; None: when its result
        arrived). A claim is stamped with the database's ``now()`` as the statement starts, never
        before it was sent, and a peer may take it over a hold time after that stamp: so the hold
        counts from the send, not from the result's arrival, which a stalled commit (an fsync or
        a synchronous standby that hangs, which no statement timeout bounds) can delay past the
        hold time. A row held past it is given back unfired."""
        advance = self.settings.timing_advance_ms / 1000
        seq = self._seq
        entries: list[Entry] = []
        total = 0
        count_until: float | None = None  # the batch's budget for counting skips one by one
        estimated = 0
        for row in rows:
            size = row_bytes(row.key, row.value, row.headers)
            total += size
            seq += 1
            if row.recurrence is None:
                timer = Timer(row, size)
            else:
                now = self.monotonic()
                if count_until is None:
                    count_until = now + self.hold * COUNT_BUDGET_SHARE
                timer = _occurrence(row, size, COUNT_LIMIT if now < count_until else 0)
                estimated += timer.estimated
            row = timer.row
            timer.held_until = (row.claimed_monotonic if sent_at is None else sent_at) + self.hold
            fire_at = row.claimed_monotonic + row.remaining_ms / 1000 - advance
            entries.append((fire_at, seq, timer))
        self._seq = seq
        if estimated:
            log.info(
                "%d series in a claimed batch missed more occurrences than were counted: "
                "their skipped counts are estimated from their rules' periods",
                estimated,
                extra={"event": "skips_estimated"},
            )
        push = heapq.heappush
        tenants = Counter(row.tenant for row in rows)
        with self.cond:
            timers = self.timers  # read under the lock: take_unfired swaps the list
            for entry in entries:
                push(timers, entry)
            self.unfired.update(tenants)
            self.cond.notify()
        return total

    def stalled_for(self, now: float) -> float:
        """Seconds for which records have been in flight without one being delivered (0 while
        nothing is in flight). Read from the loop thread: a benign race on two numbers."""
        if self.in_flight <= 0:
            return 0.0
        return max(0.0, now - self.progress_at)

    def held(self) -> int:
        with self.cond:
            return len(self.timers) + self.in_flight + len(self.delivered) + len(self.failed)

    def take_outcomes(
        self,
    ) -> tuple[list[Timer], list[tuple[Timer, KafkaError | None]], list[Timer]]:
        with self.cond:
            delivered, self.delivered = self.delivered, []
            failed, self.failed = self.failed, []
            expired, self.expired = self.expired, []
            self.outcome_ready.clear()
        return delivered, failed, expired

    def unfired_by_tenant(self) -> dict[str, int]:
        """The timers not fired yet, per tenant (a copy)."""
        with self.cond:
            return dict(self.unfired)

    def take_unfired(self) -> list[Timer]:
        with self.cond:
            unfired, self.timers = self.timers, []
            self.unfired.clear()
        return [timer for _, _, timer in unfired]

    def take_where(self, wanted: Callable[[ClaimedRow], bool]) -> list[Timer]:
        """Take the unfired timers whose rows are ``wanted`` (a pause: they are given back)."""
        with self.cond:
            taken = [e for e in self.timers if wanted(e[2].row)]
            if taken:
                self.timers = [e for e in self.timers if not wanted(e[2].row)]
                heapq.heapify(self.timers)
                self._fired([timer for _, _, timer in taken])
        return [timer for _, _, timer in taken]

    def _fired(self, timers: list[Timer]) -> None:
        """These timers left the heap (under ``cond``): no longer any tenant's queue."""
        unfired = self.unfired
        for tenant, n in Counter(t.row.tenant for t in timers).items():
            left = unfired[tenant] - n
            if left > 0:
                unfired[tenant] = left
            else:
                del unfired[tenant]

    def stop(self) -> None:
        self.stopping.set()
        with self.cond:
            self.cond.notify()

    # -- the dispatcher thread ------------------------------------------------------------

    def run(self) -> None:
        while not self.stopping.is_set():
            self.alive_at = time.monotonic()
            self.fire_due()
            self.serve_reports()
            with self.cond:
                if self.stopping.is_set():
                    break
                wait = 0.05
                if self.timers:
                    wait = min(wait, self.timers[0][0] - self.monotonic())
                if self.in_flight:
                    wait = min(wait, 0.005)  # serve delivery reports promptly
                if wait > 0:
                    self.cond.wait(wait)

    def serve_reports(self) -> None:
        """Serve the delivery reports that have arrived, then produce the audit events they
        queued (in one batch, beside the fired records)."""
        self.publisher.poll(0)
        if self.audit is not None and self.audit.queued:
            self.audit.write()

    def fire_due(self) -> None:
        now = self.monotonic()
        if not self.leadership.may_fire(now):
            return  # past this node's lease: fire nothing (the loop gives the timers back)
        due: list[Timer] = []
        pop = heapq.heappop
        with self.cond:
            timers = self.timers  # read under the lock: take_unfired swaps the list
            while timers and timers[0][0] <= now:
                due.append(pop(timers)[2])
            if due:
                self._fired(due)
        if not due:
            return
        produce = self._produce
        for timer in due:
            if now >= timer.held_until:
                # Held past the hold time (this process was paused, or the claim's commit was
                # held up): a peer may already have taken it over, so give it back (fenced)
                # rather than fire it twice.
                with self.cond:
                    self.expired.append(timer)
                continue
            produce(timer)
        fault_point("after_produce")

    def drain(self, timeout: float) -> None:
        """Wait (on the caller's thread) for outstanding delivery reports."""
        deadline = self.monotonic() + timeout
        while self.in_flight and self.monotonic() < deadline:
            self.publisher.poll(0.05)
        if self.audit is not None:  # the audit records of what was delivered: briefly
            self.audit.write()
            if self.audit.outstanding:
                self.publisher.flush(max(0.0, min(1.0, deadline - self.monotonic())))

    def _produce(self, timer: Timer) -> None:
        row = timer.row
        topic = row.target_topic or self.output_topic
        headers = row.headers
        # Lateness on the database clock, as the timers are: the time since the claim result
        # arrived minus the time that was left until the deadline then (never this node's wall
        # clock, which may be off), taken when the record is handed to the producer (the
        # record's timestamp), counted by the firing loop once its delivery is confirmed.
        timer.lateness = self.monotonic() - row.claimed_monotonic - row.remaining_ms / 1000
        reason = ""
        limit_ms = expiry_limit_ms(row.expires_ms, self.settings)
        if row.target_topic in self.refused:
            # Stored before the topic was refused (an audit topic set since) or written by hand:
            # never fired there (a forged audit event, a record consumed again); a series ends.
            reason = refused_reason(topic)
            timer.reason, timer.next_deadline = "topic_not_allowed", None
            if not self.settings.dead_letter_topic:
                self._drop(timer, reason)
                return
        elif limit_ms is not None and timer.lateness > limit_ms / 1000:
            # Stale (the cluster was away, or the backlog too deep): never fired late.
            limit = expiry_limit_text(row.expires_ms, self.settings)
            reason = f"expired: due {timer.lateness * 1000:.0f} ms ago, later than {limit}"
            timer.reason = "expired"
            if self.settings.expired_action == "drop" or not self.settings.dead_letter_topic:
                self._drop(timer, reason)
                return
        # A row never refused (nearly every row) is never dead-lettered: max_publish_attempts
        # is at least 1, so the policy is asked only about rows refused before.
        elif row.attempts and should_dead_letter(row.attempts, self.settings):
            # The broker refused it max_publish_attempts times: dead-letter it with the reason.
            reason = (
                f"publishing to {topic} failed {row.attempts} times: {row.last_error or 'unknown'}"
            )
            timer.reason = "publish_failed"
        if not reason and (self.settings.relay_id_header or self.settings.relay_deadline_header):
            headers = relay_headers(
                headers,
                row.id,
                row.deadline,
                self.settings.relay_id_header,
                self.settings.relay_deadline_header,
            )
        if reason:
            # What its replay needs (the row's Chronos headers were stripped at intake).
            due = datetime.fromtimestamp(row.deadline, UTC)
            scheduled = scheduled_headers(
                row.id, due, row.target_topic, row.tenant, row.recurrence is not None
            )
            source = f"chronos/{row.id}"
            headers = dead_letter_headers(row.headers, reason, source, timer.reason, scheduled)
            topic = self.settings.dead_letter_topic
            timer.dead_letter = True
        if self.in_flight == 0:
            self.progress_at = self.monotonic()
        self.in_flight += 1
        self.publisher.produce(topic, row.key, row.value, headers, partial(self._report, timer))
        # The producer holds its own copy now, and nothing after the delivery reads the record
        # (a failed one is given back and claimed again from the table): the timer lets go of
        # it, so a claimed byte is held once, not twice, until its delivery report.
        timer.row = _NEW_ROW(ClaimedRow, (*row[:_KEY], None, None, [], *row[_AFTER_HEADERS:]))

    def _drop(self, timer: Timer, reason: str) -> None:
        """Not fired and not dead-lettered: deleted as if delivered, counted and logged."""
        timer.dead_letter = True
        metrics.DROPPED.labels(timer.reason).inc()
        log.warning(
            "message %s dropped: %s",
            timer.row.id,
            reason,
            extra={"event": "dropped", "reason": timer.reason},
        )
        with self.cond:
            self.delivered.append(timer)
        if not self.outcome_ready.is_set():
            self.outcome_ready.set()
        if self.audit is not None:
            self._audit(timer, None)

    def _audit(self, timer: Timer, position: tuple[str, int, int] | None) -> None:
        """Queue the audit event of a delivered (or dropped) timer."""
        row = timer.row
        assert self.audit is not None
        if timer.dead_letter:
            reason = timer.reason
            if reason == "publish_failed":
                reason = f"publishing failed {row.attempts} times: {row.last_error or 'unknown'}"
            elif reason == "topic_not_allowed":
                reason = refused_reason(row.target_topic or "")
            else:
                reason = f"{timer.lateness * 1000:.0f} ms late, past its expiry"
            event = audit.dead_lettered(
                self.node_id,
                row.id,
                row.tenant,
                row.deadline,
                row.deadline + timer.lateness,
                timer.reason,
                reason,
                position,
            )
        else:
            assert position is not None
            event = audit.fired(
                self.node_id, row.id, row.tenant, row.deadline, timer.lateness, *position
            )
        self.audit.add(event)

    def _report(self, timer: Timer, err: KafkaError | None) -> None:
        """A delivery report (served by the publisher's poll, on the thread that polls)."""
        self.in_flight -= 1
        if err is None:
            self.progress_at = self.monotonic()
            timer.position = self.publisher.position  # for its history record
        with self.cond:
            if err is None:
                self.delivered.append(timer)
            else:
                self.failed.append((timer, err))
        if not self.outcome_ready.is_set():  # set() takes a lock: once per batch of reports
            self.outcome_ready.set()
        if err is None and self.audit is not None:
            partition, offset = self.publisher.position
            topic = self.settings.dead_letter_topic if timer.dead_letter else None
            topic = topic or timer.row.target_topic or self.output_topic
            self._audit(timer, (topic, partition, offset))
        if err is None and timer.dead_letter:
            row = timer.row
            metrics.DEAD_LETTERED.labels(timer.reason).inc()
            if timer.reason == "expired":
                log.warning(
                    "message %s dead-lettered: %.0f ms late, past CHRONOS_MAX_LATENESS_MS",
                    row.id,
                    timer.lateness * 1000,
                    extra={"event": "dead_lettered", "reason": "expired"},
                )
            elif timer.reason == "topic_not_allowed":
                log.error(
                    "message %s dead-lettered: its topic %s is never fired to",
                    row.id,
                    row.target_topic,
                    extra={"event": "dead_lettered", "reason": "topic_not_allowed"},
                )
            else:
                log.error(
                    "message %s dead-lettered after %d failed publishes",
                    row.id,
                    row.attempts,
                    extra={"event": "dead_lettered", "reason": "publish_failed"},
                )


def refused_reason(topic: str) -> str:
    """The dead letter's reason for a row naming a refused topic (as intake words it)."""
    return (
        f"header chronosTopic {topic!r} is not allowed (never the input or dead-letter topic, "
        "nor the audit topic)"
    )


def _occurrence(row: ClaimedRow, size: int, count_limit: int) -> Timer:
    """The timer of a claimed series: the occurrence it fires (the row's deadline, or with
    ``chronosMissed: latest`` the latest of the occurrences it missed, which moves the timer's
    deadline and remaining time to it), the skipped ones (counted up to ``count_limit``, then
    estimated), and the next one its row advances to. A rule that cannot be read (never written
    by this release) fires once and ends the series."""
    assert row.recurrence is not None
    now = row.deadline - row.remaining_ms / 1000  # the database clock when the claim finished
    try:
        plan = decode(row.recurrence).plan(row.deadline, now, count_limit=count_limit)
    except (ValueError, KeyError, TypeError, OverflowError, StopIteration) as exc:
        log.error(
            "message %s has an unreadable rule %r (%s): it fires once",
            row.id,
            row.recurrence[:200],
            exc,
            extra={"event": "bad_recurrence", "message_id": row.id},
        )
        return Timer(row, size)
    if plan.fire != row.deadline:
        shift_ms = (plan.fire - row.deadline) * 1000
        row = row._replace(deadline=plan.fire, remaining_ms=row.remaining_ms + shift_ms)
    following = None if plan.next is None else datetime.fromtimestamp(plan.next, UTC)
    return Timer(row, size, next_deadline=following, skipped=plan.skipped, estimated=plan.estimated)
