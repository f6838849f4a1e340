"""Phase 2 of ready-and-fire, the firing loop's half that acts on delivery outcomes: delete the
rows whose delivery succeeded (fenced by this node's claim), give back the failed and expired
ones, and on shutdown give back what never fired. ``FiringLoop`` (chronos.firing.loop) mixes it
in; the attributes it uses are the loop's own (set in its constructor)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from confluent_kafka import KafkaError

from chronos.config.settings import Settings
from chronos.errors import StoreError
from chronos.firing.deleter import Deleter, Deletion
from chronos.firing.dispatcher import Dispatcher, Timer
from chronos.firing.history import endings
from chronos.firing.tenant_share import TenantShare
from chronos.kafka import delivery_error, is_permanent
from chronos.observability import metrics
from chronos.observability.dependencies import KAFKA_WRITES
from chronos.observability.logs import Throttle
from chronos.observability.tenants import TenantMetrics
from chronos.runtime.faults import fault_point
from chronos.store import Claim, Store

TIMED_OUT = KafkaError._MSG_TIMED_OUT

log = logging.getLogger("chronos.firing.loop")  # one logger name for the firing loop

DELETE_BATCH = 2000
DELETE_MAX_AGE = 0.02  # seconds a delivered row may wait for its batched delete
DELETE_RETRY_DELAY = 0.5  # seconds before a failed delete is tried again
# The longest back-off between claims while writes fail: the claims are probes of a few rows
# then (WRITE_PROBE_ROWS), so the first to go through finds the broker back within this.
WRITE_FAILURE_BACKOFF_MAX = 1.0


class Outcomes:
    """Phase 2 (delete / release) and the shutdown drain of the firing loop."""

    # The firing loop's state this half reads and writes (set by FiringLoop.__init__).
    settings: Settings
    store: Store
    dispatcher: Dispatcher
    deleter: Deleter
    monotonic: Callable[[], float]
    node_id: str
    claims_since: datetime | None
    park_attempts: int
    share: TenantShare
    tenant_metrics: TenantMetrics
    publish_failures: Throttle
    unreleased: list[tuple[list[Claim], bool, list[str] | None]]
    pending_delete: list[Timer]
    pending_since: float
    held_bytes: int
    delivered_at: float | None
    next_claim_at: float
    claim_backoff: float

    # -- phase 2: delete / release ------------------------------------------------------------

    def finish(self, *, force: bool) -> None:
        delivered, failed, expired = self.dispatcher.take_outcomes()
        if delivered:
            self.delivered_at = self.monotonic()
            metrics.DELIVERED_AT.set_to_current_time()  # the heartbeat says it (fired_at)
            if KAFKA_WRITES.down:  # back: what came due meanwhile is claimed at once
                self.next_claim_at = min(self.next_claim_at, self.delivered_at)
            KAFKA_WRITES.succeeded()
            # Lateness counted once delivery is confirmed, a batch at a time (dead letters
            # are not fired messages).
            metrics.LATENESS.observe_many([t.lateness for t in delivered if not t.dead_letter])
            if not self.pending_delete:
                self.pending_since = self.monotonic()
            self.pending_delete.extend(delivered)
        for deletion in self.deleter.wait() if force else self.deleter.take_done():
            self._deleted(deletion)
        if self.pending_delete and (
            force
            or len(self.pending_delete) >= DELETE_BATCH
            or self.monotonic() - self.pending_since >= DELETE_MAX_AGE
        ):
            if force:  # on this thread: the rows are deleted when finish returns
                self._deleted(self._deletion().run(self.store, self.node_id))
            elif self.deleter.busy is None:  # else gathered into the next deletion
                self.deleter.submit(self._deletion())
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

    def _deletion(self) -> Deletion:
        """The delete of the rows delivered so far (the deleter's thread or this one runs it)."""
        batch, self.pending_delete = self.pending_delete, []
        fault_point("after_report")
        claims: list[Claim] = [(t.row.id, t.row.readied_at) for t in batch]
        # Occurrences of series advance their rows to the next one in the same statement. A
        # batch with any series passes its nexts even when none has a next occurrence: a series
        # replaced by a reschedule while claimed is then given back, not deleted.
        nexts = [t.next_deadline for t in batch] if any(t.row.recurrence for t in batch) else None
        ends = endings(batch, self.settings)  # their history, written by the same statement
        return Deletion(batch, claims, nexts, ends)

    def _deleted(self, deletion: Deletion) -> None:
        """Account a deletion that ran: forget its rows, or keep them to try again."""
        batch, claims, nexts, exc = deletion.batch, deletion.claims, deletion.nexts, deletion.error
        if exc is not None:
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
        deleted = deletion.deleted
        self._forget(batch)  # only once: a failed delete keeps its rows held and tries again
        metrics.STATEMENT_DURATION.labels("delete").observe(deletion.seconds)
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
            self._release(claims, failed, [delivery_error(err)[:500] for _, err in items])
        if transient and (
            self.delivered_at is None
            or self.monotonic() - self.delivered_at >= self.settings.delivery_timeout_ms / 1000
        ):
            # Nothing delivered for a whole delivery timeout: the writes fail, not a partition
            # whose leader is moving while the others take records.
            timed_out = [e for _, e in transient if e is not None and e.code() == TIMED_OUT]
            if timed_out and not KAFKA_WRITES.down:
                # Let go of every record still held too. The client sends again, under a new
                # epoch, what it holds for a leader each time one of its records times out, and
                # a leader that appended them but could not commit (too few replicas) commits
                # every attempt later: up to 12 copies of one produce once the quorum of
                # replicas was lost, as the records of a whole delivery timeout timed out one
                # after the other. Given back instead, they wait as rows; probes go meanwhile.
                self.dispatcher.publisher.replace(
                    f"no record delivered for a whole delivery timeout ({timed_out[0]})"
                )
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
