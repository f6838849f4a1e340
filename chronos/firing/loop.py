"""Ready-and-fire: claim due rows (phase 1), publish them, delete the delivered ones (phase 2).

Precision beyond polling: rows are claimed up to ``lookahead`` before they are due and fired from
an in-memory timer at ``deadline - timing advance``. The time left until each deadline is measured
on the database clock (the claim statement returns it) and anchored to this process's monotonic
clock when the result *arrived*, so a message is never fired before ``deadline - advance`` whatever
this node's wall clock says.

Two threads share the work so that a slow statement never delays a timer:

* the loop thread claims (phase 1) and deletes/releases (phase 2), one statement per batch;
* the ``Dispatcher`` thread (chronos.firing.dispatcher) sleeps until the earliest timer, publishes
what
  is due and serves the producer's delivery reports.

Phase 2 deletes only rows whose delivery report succeeded, fenced by this node's claim
(``readied_by`` and ``readied_at``); a row a peer re-claimed after a suspected failure is never
deleted, and its absence is a warning. A failed delivery gives the row back for a retry: a
permanent refusal (e.g. too large) counts as an attempt, and after ``max_publish_attempts`` the
message is dead-lettered with the broker's error; an outage does not count, and claiming backs
off instead.

The fence (``chronos.cluster.leadership``): a node fires and claims only while its lease, renewed by
each successful heartbeat, lasts. Past it (the database unreachable, the process paused) the
dispatcher fires nothing and the loop gives back what it holds, before the leader may take the
node's claims over; when the lease is renewed, the loop gives back whatever it still holds in the
table, then claims again.

Tenants: while the previous claim came back full (more is due than a claim takes:
overload), the next claim shares its batch between the tenants with due rows (the store's fair
claim); otherwise it is the plain oldest-first claim. The claim-ahead budget is shared too
(``chronos.firing.tenant_share``).

The claim statement runs again at once while it returns full batches (a backlog drains at full
speed); otherwise it waits the poll interval less the time taken, plus a little jitter.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime

from confluent_kafka import KafkaError

from chronos.cluster.leadership import Leadership
from chronos.config.policy import park_after
from chronos.config.settings import Settings
from chronos.errors import StoreError
from chronos.firing.catchup import CatchupPacer
from chronos.firing.dispatcher import Dispatcher, Timer
from chronos.firing.limits import LimitWatch
from chronos.firing.pauses import PauseWatch
from chronos.firing.tenant_share import TenantShare
from chronos.kafka import Publisher, is_permanent
from chronos.observability import metrics
from chronos.observability.dependencies import FLOW_CONTROL, KAFKA_WRITES
from chronos.observability.logs import Throttle
from chronos.observability.tenants import TenantMetrics
from chronos.runtime.faults import fault_point
from chronos.runtime.loop import Loop
from chronos.store import Claim, Store

log = logging.getLogger(__name__)

DELETE_BATCH = 2000
DELETE_MAX_AGE = 0.02  # seconds a delivered row may wait for its batched delete
DELETE_RETRY_DELAY = 0.5  # seconds before a failed delete is tried again

WRITE_PROBE_ROWS = 10  # rows held at most while writes to Kafka fail
# The longest back-off between claims while writes fail: the claims are probes of a few rows
# then (WRITE_PROBE_ROWS), so the first to go through finds the broker back within this.
WRITE_FAILURE_BACKOFF_MAX = 1.0
WARM_TIMEOUT_S = 1.0  # the longest a warm-up step waits for the output topic's metadata


class FiringLoop(Loop):
    name = "firing"
    cold_start = True  # warm once the producer is (see warm_up) and the first claim has run

    def __init__(
        self,
        settings: Settings,
        store: Store,
        publisher: Publisher,
        leadership: Leadership,
        monotonic: Callable[[], float] = time.monotonic,
        *,
        claims_since: datetime | None = None,
    ):
        super().__init__()
        self.settings = settings
        self.store = store
        self.leadership = leadership
        self.monotonic = monotonic
        self.node_id = settings.node_id
        self.claims_since = claims_since  # this process's start (DB clock): its claims' fence
        self.unreleased: list[tuple[list[Claim], bool, list[str] | None]] = []
        self.horizon_ms = settings.timing_advance_ms + settings.lookahead_ms
        self.park_attempts = park_after(settings)  # then parked: never claimed
        self.dispatcher = Dispatcher(settings, publisher, leadership, monotonic)
        self.fenced = False  # the lease ended: nothing claimed until the table is given back
        self.pending_delete: list[Timer] = []
        self.held_bytes = 0  # bytes of every row claimed and not yet deleted or given back
        self.tenant_metrics = TenantMetrics(settings.tenant_metrics_top)
        self.share = TenantShare(settings, store)  # the claim-ahead budget between tenants
        self.pending_since = 0.0
        self.next_claim_at = 0.0
        self.claim_backoff = 0.0
        self.delivered_at: float | None = None  # the last successful delivery (monotonic)
        self.publish_failures = Throttle()  # a broker away repeats them: one line a minute
        self.overloaded = False  # the previous claim came back full: the next one is fair
        self.pauses = PauseWatch(store, settings.output_topic, settings.max_lateness_ms or None)
        self.catchup = CatchupPacer(settings, store)
        self.limits = LimitWatch(settings, store, self.catchup.live)
        self.publisher_warm = False
        self.claimed_once = False  # the claim statement ran (its first run plans it)

    def progress_at(self) -> float:
        return min(self.alive_at, self.dispatcher.alive_at)

    # -- the loop -----------------------------------------------------------------------------

    def run(self) -> None:
        thread = threading.Thread(
            target=self.dispatcher.run, name="chronos-dispatcher", daemon=True
        )
        thread.start()
        self.park_exhausted()
        try:
            while not self.stopping.is_set():
                self.alive_at = time.monotonic()
                if not thread.is_alive():
                    raise RuntimeError("the dispatcher thread died")
                self.step()
                self.idle()
        finally:
            self.dispatcher.stop()
            thread.join(5)
            self.drain()

    def step(self) -> None:
        """One iteration: claim if it is time, then finish the rows whose outcome is known."""
        if not self.warm.is_set():
            self.warm_up()
        now = self.monotonic()
        if not self.leadership.may_fire(now):
            self.fence(now)
        elif self.fenced:
            self.unfence(now)
        else:
            if self.pauses.due(now) and self.pauses.refresh(now):
                self.give_back_paused()
            if now >= self.next_claim_at or self.share.freed():
                self.claim(now)
        self.finish(force=False)

    def warm_up(self) -> None:
        """Until the loop is warm (the node reports ready only then): the producer learns the
        output topic's partitions and leaders and connects to them, publishing nothing, so the
        first fire pays no round trip for them; the first claim has run the claim statement."""
        if not self.publisher_warm:
            publisher = self.dispatcher.publisher
            self.publisher_warm = publisher.warm(self.settings.output_topic, WARM_TIMEOUT_S)
        if self.publisher_warm and self.claimed_once:
            self.warm.set()
            log.info("firing is warm", extra={"event": "firing_warm"})

    def give_back_paused(self) -> None:
        """Something new is paused: the rows of it this node claimed ahead are given back, not
        fired (those already past their expiry limit fire: dead-lettered as expired)."""
        paused = self.dispatcher.take_where(self.pauses.holds(self.monotonic))
        if paused:
            self._forget(paused)
            metrics.IN_FLIGHT.set(self.dispatcher.held())
            log.info(
                "%d claimed messages of paused tenants or topics given back",
                len(paused),
                extra={"event": "paused_given_back", "count": len(paused)},
            )
            self._release([(t.row.id, t.row.readied_at) for t in paused], False, None)

    # -- the fence ----------------------------------------------------------------------------

    def fence(self, now: float) -> None:
        """The lease ended: give back every unfired row (kept to try again if the database is
        out of reach: the leader takes them over meanwhile once the heartbeat lapsed) and claim
        nothing."""
        if not self.fenced:
            self.fenced = True
            log.warning(
                "node %s could not renew its heartbeat in time: it stops firing and gives back "
                "its claims before its peers may take them over",
                self.node_id,
                extra={"event": "lease_lapsed", "node": self.node_id},
            )
        self.next_claim_at = now + self.settings.poll_interval_ms / 1000
        unfired = self.dispatcher.take_unfired()
        metrics.IN_FLIGHT.set(self.dispatcher.held())
        if unfired:
            log.warning(
                "%d claims expired before firing (the lease ended); giving them back",
                len(unfired),
                extra={"event": "claim_expired", "cause": "lease"},
            )
            self._release([(t.row.id, t.row.readied_at) for t in unfired], False, None)

    def unfence(self, now: float) -> None:
        """The lease is back: give back what the table still has claimed by this node (rows a
        failed release left behind), then claim again."""
        self.next_claim_at = now + self.settings.poll_interval_ms / 1000
        self.finish(force=True)  # delete what was delivered first: it must not fire again
        try:
            released = self.store.release_node(self.node_id, self.claims_since)
        except StoreError as exc:
            metrics.DATABASE_ERRORS.labels("release").inc()
            log.log(exc.log_level, "release after the lease ended failed: %s", exc)
            return
        self.fenced = False
        log.info(
            "node %s renewed its heartbeat: firing again (%d stale claims given back)",
            self.node_id,
            released,
            extra={"event": "lease_renewed", "node": self.node_id},
        )

    def idle(self) -> None:
        wake = self.next_claim_at
        if self.pending_delete:
            wake = min(wake, self.pending_since + DELETE_MAX_AGE)
        timeout = wake - self.monotonic()
        if timeout > 0:
            # Wakes early when a delivery outcome arrives or the loop is stopped.
            self.dispatcher.outcome_ready.wait(min(timeout, 0.1))

    def park_exhausted(self) -> None:
        """Stamp the rows a previous release parked by their attempts alone, so they leave the
        index the claim walks (idempotent; rows parked since are stamped as they are parked)."""
        try:
            parked = self.store.park_exhausted(self.park_attempts)
        except StoreError as exc:  # the claim skips those rows anyway (attempts)
            log.log(
                exc.log_level,
                "could not park exhausted rows: %s",
                exc,
                extra={"event": "database_error"},
            )
            return
        if parked:
            log.info(
                "%d rows parked by an earlier release were moved out of the claim's index",
                parked,
                extra={"event": "parked_rows_stamped", "count": parked},
            )

    # -- phase 1: claim -----------------------------------------------------------------------

    def claim(self, started: float) -> None:
        room = self.settings.max_in_flight - self.dispatcher.held() - len(self.pending_delete)
        if KAFKA_WRITES.down:
            # Writes fail (too few in-sync replicas, no leader): a record a leader appended
            # but could not commit may still be committed later, so every failed attempt can
            # leave a copy. Probe with a few rows until a delivery succeeds.
            room = min(room, WRITE_PROBE_ROWS - self.dispatcher.held())
        room_bytes = self.settings.max_in_flight_bytes - self.held_bytes
        poll = self.settings.poll_interval_ms / 1000
        if room <= 0 or room_bytes <= 0:
            self.next_claim_at = started + poll
            return
        limit = min(self.settings.claim_batch_size, room)
        excluded = self.share.excluded(started)
        paused = self.limits.exclude(self.pauses.current, started)
        if not (self.pauses.known and self.limits.known):
            # What is paused or limited is not known (FLOW_CONTROL says why): claim nothing.
            self.next_claim_at = started + poll
            return
        FLOW_CONTROL.succeeded()
        t0, sent_at = time.perf_counter(), self.monotonic()  # sent_at: the claim's hold starts
        try:
            rows = self.store.claim(
                self.node_id,
                self.horizon_ms,
                limit,
                self.park_attempts,
                max_bytes=room_bytes,
                # Holding nothing, take one row whatever its size: a message larger than the
                # budget must still fire (the broker's size limit bounds it).
                first_always=self.held_bytes == 0,
                fair=self.overloaded,
                exclude_tenants=excluded,
                paused=paused,
                max_lateness_ms=self.pauses.max_lateness_ms,
                catchup=self.catchup.budget(started, room - limit),  # within max_in_flight
            )
        except StoreError as exc:  # keep firing what we hold meanwhile
            metrics.DATABASE_ERRORS.labels("claim").inc()
            log.log(exc.log_level, "claim failed: %s", exc, extra={"event": "database_error"})
            self.share.held_back = set()  # back off, whatever is freed meanwhile
            self.claim_backoff = min(5.0, max(poll, self.claim_backoff * 2))
            self.next_claim_at = self.monotonic() + self.claim_backoff * random.uniform(0.5, 1)
            return
        self.claim_backoff, self.claimed_once = 0.0, True
        metrics.STATEMENT_DURATION.labels("claim").observe(time.perf_counter() - t0)
        claimed_bytes = 0
        self.catchup.spent(rows)
        rows, over = self.limits.take(rows, self.monotonic())  # over a limit: given back, wait
        if over:
            self._release([(r.id, r.readied_at) for r in over], False, None)
        if rows:
            fault_point("after_claim")
            metrics.BATCH_SIZE.labels("claim").observe(len(rows))
            claimed_bytes = self.dispatcher.add(rows, sent_at)  # each row's size, with its timer
            self.held_bytes += claimed_bytes
            self.share.claimed(r.tenant for r in rows)
        returned = self.monotonic()
        metrics.IN_FLIGHT.set(self.dispatcher.held())
        full = len(rows) >= limit or bool(over) or bool(rows and 2 * claimed_bytes >= room_bytes)
        # A tenant held back holds its share because it has more due: the backlog is still
        # there even when this claim came back short, so the next claim shares its batch too (a
        # plain claim would take the held-back tenant's oldest rows before anyone else's).
        self.overloaded = full or bool(excluded)
        self.share.held_back = set(excluded)
        if full:
            # A backlog (by count or by bytes): claim again at once, as room allows, sharing the
            # next batch between the tenants with due rows.
            self.next_claim_at = returned
        else:
            elapsed = returned - started
            jitter = random.uniform(0, 0.1 * poll)
            self.next_claim_at = returned + max(0.0, poll - elapsed) + jitter

    # -- phase 2: delete / release ------------------------------------------------------------

    def finish(self, *, force: bool) -> None:
        delivered, failed, expired = self.dispatcher.take_outcomes()
        if delivered:
            self.delivered_at = self.monotonic()
            if KAFKA_WRITES.down:  # back: what came due meanwhile is claimed at once
                self.next_claim_at = min(self.next_claim_at, self.delivered_at)
            KAFKA_WRITES.succeeded()
            # Lateness counted once delivery is confirmed, a batch at a time (dead letters
            # are not fired messages).
            metrics.LATENESS.observe_many([t.lateness for t in delivered if not t.dead_letter])
            if not self.pending_delete:
                self.pending_since = self.monotonic()
            self.pending_delete.extend(delivered)
        if self.pending_delete and (
            force
            or len(self.pending_delete) >= DELETE_BATCH
            or self.monotonic() - self.pending_since >= DELETE_MAX_AGE
        ):
            self._delete_delivered()
        if failed:
            self._handle_failed(failed)
        if expired:
            # The failure detector never resets this node's own claims: give them back.
            self._forget(expired)
            log.warning(
                "%d claims expired before firing (paused or slow?); giving them back",
                len(expired),
                extra={"event": "claim_expired"},
            )
            self._release([(t.row.id, t.row.readied_at) for t in expired], False, None)
        if self.unreleased and not expired and not failed:
            retry, self.unreleased = self.unreleased, []
            for claims, failed_, errors in retry:
                self._release(claims, failed_, errors)

    def _release(self, claims: list[Claim], failed: bool, errors: list[str] | None) -> None:
        """Give claims back; on a database error keep them to try again (no peer would)."""
        try:
            self.store.release(
                self.node_id, claims, failed=failed, errors=errors, park_attempts=self.park_attempts
            )
        except StoreError as exc:
            metrics.DATABASE_ERRORS.labels("release").inc()
            log.log(
                exc.log_level,
                "release of %d claims failed: %s (tried again later)",
                len(claims),
                exc,
                extra={"event": "database_error"},
            )
            self.unreleased.append((claims, failed, errors))

    def _forget(self, timers: list[Timer]) -> None:
        """These rows leave this node's hands (deleted, given back or left to the detector)."""
        self.held_bytes -= sum(t.size for t in timers)
        self.share.released(t.row.tenant for t in timers)

    def _delete_delivered(self) -> None:
        batch, self.pending_delete = self.pending_delete, []
        fault_point("after_report")
        claims: list[Claim] = [(t.row.id, t.row.readied_at) for t in batch]
        # Occurrences of series advance their rows to the next one in the same statement. A
        # batch with any series passes its nexts even when none has a next occurrence: a series
        # replaced by a reschedule while claimed is then given back, not deleted.
        nexts = [t.next_deadline for t in batch] if any(t.row.recurrence for t in batch) else None
        t0 = time.perf_counter()
        try:
            deleted = self.store.delete_fired(self.node_id, claims, nexts)
        except StoreError as exc:
            # The rows stay claimed by this process (no peer resets them while it lives): try
            # the delete again a little later; if the node dies first, a peer resets them after
            # the hold time and they fire again (a duplicate, never a loss).
            metrics.DATABASE_ERRORS.labels("delete").inc()
            log.log(
                exc.log_level,
                "delete of %d fired rows failed: %s (tried again later)",
                len(batch),
                exc,
                extra={"event": "database_error"},
            )
            self.pending_delete = batch + self.pending_delete
            self.pending_since = self.monotonic() + DELETE_RETRY_DELAY
            return
        self._forget(batch)  # only once: a failed delete keeps its rows held and tries again
        metrics.STATEMENT_DURATION.labels("delete").observe(time.perf_counter() - t0)
        metrics.BATCH_SIZE.labels("delete").observe(len(batch))
        gone = deleted
        # Fired: delivered to its own topic and deleted by this node (not a dead letter, and
        # not a row a peer had taken over: that one is counted where it is deleted).
        fired = [t for t in batch if not t.dead_letter and t.row.id in gone]
        metrics.FIRED.inc(len(fired))
        if nexts is not None:
            occurrences = [t for t in batch if t.row.recurrence and t.row.id in gone]
            metrics.OCCURRENCES.inc(sum(1 for t in occurrences if not t.dead_letter))
            metrics.SKIPPED_OCCURRENCES.inc(sum(t.skipped for t in occurrences))
        self.tenant_metrics.observe_fired((t.row.tenant, t.lateness) for t in fired)
        if len(deleted) != len(batch):
            missing = [c[0] for c in claims if c[0] not in deleted]
            metrics.FENCED_DELETES.inc(len(missing))
            for message_id in missing[:20]:
                log.warning(
                    "fired message %s was no longer claimed by this node "
                    "(a peer took it over after a suspected failure)",
                    message_id,
                    extra={"event": "fenced_delete", "message_id": message_id},
                )

    def _handle_failed(self, batch: list[tuple[Timer, KafkaError | None]]) -> None:
        """Give failed rows back. Permanent refusals count as attempts; outages do not."""
        metrics.PUBLISH_ERRORS.labels("output").inc(len(batch))
        self._forget([t for t, _ in batch])
        permanent = [(t, err) for t, err in batch if is_permanent(err)]
        transient = [(t, err) for t, err in batch if not is_permanent(err)]
        log.log(
            self.publish_failures.level(),
            "%d deliveries failed (%d permanent; first: %s); giving the rows back",
            len(batch),
            len(permanent),
            batch[0][1],
            extra={"event": "publish_failed"},
        )
        for items, failed in ((permanent, True), (transient, False)):
            if not items:
                continue
            claims = [(t.row.id, t.row.readied_at) for t, _ in items]
            self._release(claims, failed, [str(err)[:500] for _, err in items])
        if transient and (
            self.delivered_at is None
            or self.monotonic() - self.delivered_at >= self.settings.delivery_timeout_ms / 1000
        ):
            # Nothing delivered for a whole delivery timeout: the writes fail, not a partition
            # whose leader is moving while the others take records.
            KAFKA_WRITES.failed(transient[0][1])
            # The broker is unreachable or overloaded: back off before claiming again.
            self.claim_backoff = min(WRITE_FAILURE_BACKOFF_MAX, max(0.2, self.claim_backoff * 2))
            self.next_claim_at = self.monotonic() + self.claim_backoff

    # -- shutdown -----------------------------------------------------------------------------

    def drain(self) -> None:
        """Stop claiming; give back unfired rows; wait for reports; delete what was delivered."""
        unfired = self.dispatcher.take_unfired()
        self._forget(unfired)
        if unfired:
            claims = [(t.row.id, t.row.readied_at) for t in unfired]
            try:
                self.store.release(self.node_id, claims, failed=False, errors=None)
            except StoreError as exc:
                log.warning("could not release %d unfired rows: %s", len(unfired), exc)
        self.dispatcher.drain(self.settings.shutdown_timeout_ms / 1000 / 2)
        self.finish(force=True)
        try:
            released = self.store.release_node(self.node_id, self.claims_since)
        except StoreError as exc:
            log.warning("could not release this node's remaining claims: %s", exc)
            released = 0
        metrics.IN_FLIGHT.set(0)
        log.info(
            "firing stopped: %d unfired rows given back, %d more claims released",
            len(unfired),
            released,
            extra={"event": "firing_stopped"},
        )
