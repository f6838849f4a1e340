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

from chronos.cluster.leadership import Leadership
from chronos.config.policy import park_after
from chronos.config.settings import Settings
from chronos.errors import StoreError
from chronos.firing.catchup import CatchupPacer
from chronos.firing.cutoff import CutOffWatch
from chronos.firing.deleter import Deleter
from chronos.firing.dispatcher import Dispatcher, Timer
from chronos.firing.limits import LimitWatch
from chronos.firing.outcomes import DELETE_MAX_AGE, Outcomes
from chronos.firing.pauses import PauseWatch
from chronos.firing.tenant_share import TenantShare
from chronos.kafka import Publisher
from chronos.observability import metrics
from chronos.observability.dependencies import FLOW_CONTROL, KAFKA_WRITES
from chronos.observability.logs import Throttle
from chronos.observability.tenants import TenantMetrics
from chronos.runtime.faults import fault_point
from chronos.runtime.loop import Loop
from chronos.store import Claim, Store

log = logging.getLogger(__name__)

WRITE_PROBE_ROWS = 10  # rows held at most while writes to Kafka fail
WARM_TIMEOUT_S = 1.0  # the longest a warm-up step waits for the output topic's metadata


class FiringLoop(Outcomes, Loop):
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
        shards: int = 1,
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
        self.deleter = Deleter(store, self.node_id)
        self.cutoff = CutOffWatch(self.node_id, store, self.dispatcher)
        self.fenced = False  # the lease ended: nothing claimed until the table is given back
        self.pending_delete: list[Timer] = []
        self.held_bytes = 0  # bytes of every row claimed and not yet deleted or given back
        self.tenant_metrics = TenantMetrics(settings.tenant_metrics_top)
        # the claim-ahead budget between tenants
        self.share = TenantShare(settings, store, self.dispatcher.unfired_by_tenant)
        self.pending_since = 0.0
        self.next_claim_at = 0.0
        self.claim_backoff = 0.0
        self.delivered_at: float | None = None  # the last successful delivery (monotonic)
        self.publish_failures = Throttle()  # a broker away repeats them: one line a minute
        self.overloaded = False  # the previous claim came back full: the next one is fair
        self.pauses = PauseWatch(store, settings.output_topic, settings.max_lateness_ms or None)
        # The catch-up rate and the rate limits are the cluster's: shared between the live
        # nodes and, with several shards, between each node's lanes (docs/shards.md).
        self.catchup = CatchupPacer(settings, store, shards)
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
            try:
                self.drain()
            finally:
                self.deleter.stop()

    def step(self) -> None:
        """One iteration: claim if it is time, then finish the rows whose outcome is known."""
        if not self.warm.is_set():
            self.warm_up()
        now = self.monotonic()
        if not self.leadership.may_fire(now):
            self.fence(now)
            if self.leadership.holds_lease(now):  # renewed: what was held is given back now
                self.unfence(now)
        elif self.fenced:
            self.unfence(now)
        else:
            if self.pauses.due(now) and self.pauses.refresh(now):
                self.give_back_paused()
            if now >= self.next_claim_at or self.share.freed():
                self.claim(now)
            if self.cutoff.check(now):  # cut off alone: what it holds goes back to its peers
                self.give_back_unfired("this node is cut off from Kafka")
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

    def give_back_unfired(self, why: str) -> None:
        """Give back every row claimed ahead and not yet produced (produced ones come back as
        their deliveries fail)."""
        unfired = self.dispatcher.take_unfired()
        self._forget(unfired)
        metrics.IN_FLIGHT.set(self.dispatcher.held())
        if unfired:
            log.warning(
                "%d claims given back unfired: %s",
                len(unfired),
                why,
                extra={"event": "claims_given_back", "count": len(unfired)},
            )
            self._release([(t.row.id, t.row.readied_at) for t in unfired], False, None)

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
        self._forget(unfired)  # out of its hands: their bytes no longer count against the budget
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
        failed release left behind, rows its peers have not taken over yet), then tell the
        lease it may fire again and claim again."""
        self.next_claim_at = now + self.settings.poll_interval_ms / 1000
        self.finish(force=True)  # delete what was delivered first: it must not fire again
        try:
            released = self.store.release_node(self.node_id, self.claims_since)
        except StoreError as exc:
            metrics.DATABASE_ERRORS.labels("release").inc()
            log.log(exc.log_level, "release after the lease ended failed: %s", exc)
            return
        self.fenced = False
        self.leadership.given_back()
        log.info(
            "node %s renewed its heartbeat: firing again (%d stale claims given back)",
            self.node_id,
            released,
            extra={"event": "lease_renewed", "node": self.node_id},
        )

    def idle(self) -> None:
        wake = self.next_claim_at
        if self.pending_delete and self.deleter.busy is None:  # else woken when it is done
            wake = min(wake, self.pending_since + DELETE_MAX_AGE)
        timeout = wake - self.monotonic()
        if timeout > 0:
            # Wakes early when a delivery outcome arrives (while a delete is under way: when it
            # is done); a stop is seen within 0.1 s.
            busy = self.deleter.busy is not None
            event = self.deleter.finished if busy else self.dispatcher.outcome_ready
            event.wait(min(timeout, 0.1))

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
        held = self.dispatcher.held() + len(self.pending_delete) + self.deleter.rows()
        room = self.settings.max_in_flight - held
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
