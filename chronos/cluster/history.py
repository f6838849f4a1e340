"""The leader's keeping of the history of ended messages: once a minute (and at once on becoming
the leader) it creates the history's partitions ahead (today's and the next days', with the time
to live in force) and drops whole the partitions past the time to live they were created with, so
the history is purged without deleting rows. A partition that cannot be created or dropped is
counted (``chronos_history_maintenance_failures_total``), logged and tried again after
``RETRY_S``; firing never waits for it (a record whose day has no partition is not written, and
counted, while the message ends all the same). Safe when two leaders run it for a moment: every
step is idempotent (IF NOT EXISTS, IF EXISTS)."""

from __future__ import annotations

import logging
from datetime import timedelta

from chronos.errors import StoreError
from chronos.observability import metrics
from chronos.store import Maintenance, Store
from chronos.store.history import history_ttl_text

log = logging.getLogger(__name__)

INTERVAL_S = 60.0  # between rounds
RETRY_S = 10.0  # after a round that failed to create or drop a partition


class HistoryKeeper:
    """The history's partitions, kept by the leader (``tick`` from the monitor's round)."""

    def __init__(self, store: Store, ttl: timedelta) -> None:
        self.store = store
        self.ttl = ttl
        self.next_at = 0.0  # monotonic
        self.last: Maintenance | None = None
        self._announced = False

    def lost_leadership(self) -> None:
        self.next_at = 0.0  # at once when it leads again
        metrics.HISTORY_PARTITIONS.set(0)

    def tick(self, now: float) -> Maintenance | None:
        """One round when due; None when it was not, or the database could not be reached."""
        if now < self.next_at:
            return None
        if not self._announced:
            self._announced = True
            log.info(
                "history of ended messages: %s",
                f"kept for {history_ttl_text(self.ttl)} (a change applies to the partitions "
                "created after it)"
                if self.ttl
                else "off (CHRONOS_HISTORY_TTL=0); the partitions left are dropped past their "
                "own time to live",
                extra={"event": "history_ttl"},
            )
        try:
            done = self.store.maintain_history(self.ttl)
        except StoreError as exc:
            metrics.HISTORY_MAINTENANCE_FAILURES.labels("list").inc()
            log.warning(
                "history maintenance failed: %s (tried again in %.0f s)",
                exc,
                RETRY_S,
                extra={"event": "history_maintenance_failed"},
            )
            self.next_at = now + RETRY_S
            return None
        for name in done.created:
            log.info("history partition %s created", name, extra={"event": "history_partition"})
        for name in done.dropped:
            log.info(
                "history partition %s dropped (past its time to live)",
                name,
                extra={"event": "history_partition_dropped"},
            )
        for name in done.failed:
            action = "drop" if name in done.failed_drops else "create"
            metrics.HISTORY_MAINTENANCE_FAILURES.labels(action).inc()
            log.error(
                "history partition %s could not be %s (tried again in %.0f s; firing goes on)",
                name,
                "dropped" if action == "drop" else "created",
                RETRY_S,
                extra={"event": "history_maintenance_failed", "partition": name},
            )
        metrics.HISTORY_PARTITIONS.set(done.partitions)
        self.last = done
        self.next_at = now + (RETRY_S if done.failed else INTERVAL_S)
        return done
