"""Failure detection and recovery: reset rows claimed longer ago than the hold time.

The design's two queries: first find rows whose ``readied_at`` is past the hold time (on the
database clock), then reset each only if its claim is still the one observed (compare-and-set on
``readied_by`` and ``readied_at``), logging "suspected failure of {node} for message {id}". Rows
another node reset meanwhile, or that their owner finished, are left alone. It repeats while it
finds full batches, so any number of stuck rows is reset in one sweep.

A node never suspects itself: the claims this very process made (its node id, claimed since it
started on the database clock) are skipped. A slow statement of its own firing loop is no
failure; its firing loop gives back the claims it held past the hold time (fenced), and rows it
already produced are deleted when delivered.
"""

from __future__ import annotations

import logging
import random
import time
from datetime import datetime

from chronos import metrics
from chronos.loop import Loop
from chronos.settings import Settings
from chronos.store import Store

log = logging.getLogger(__name__)

SWEEP_BATCH = 5000


class RecoveryLoop(Loop):
    name = "recovery"

    def __init__(
        self,
        settings: Settings,
        store: Store,
        batch: int = SWEEP_BATCH,
        *,
        claims_since: datetime | None = None,
    ):
        super().__init__()
        self.settings = settings
        self.own = (settings.node_id, claims_since)  # None: every claim of this node id
        self.store = store
        self.batch = batch

    def run(self) -> None:
        interval = self.settings.failure_detection_interval_ms / 1000
        while not self.stopping.is_set():
            self.alive_at = time.monotonic()
            started = time.monotonic()
            try:
                self.sweep()
            except Exception as exc:  # StoreError: try again next interval
                metrics.DATABASE_ERRORS.labels("recovery").inc()
                log.warning(
                    "failure detection sweep failed: %s", exc, extra={"event": "database_error"}
                )
            elapsed = time.monotonic() - started
            if self.wait(max(0.0, interval - elapsed) + random.uniform(0, 0.1 * interval)):
                break

    def sweep(self) -> int:
        """One sweep; returns how many rows were reset."""
        total = 0
        while not self.stopping.is_set():
            stuck = self.store.find_stuck(self.settings.hold_time_ms, self.batch, self.own)
            if not stuck:
                break
            reset = self.store.reset_stuck(stuck)
            total += len(reset)
            metrics.SUSPECTED_FAILURES.inc(len(reset))
            for message_id, node in reset:
                log.warning(
                    "suspected failure of %s for message %s",
                    node,
                    message_id,
                    extra={"event": "suspected_failure", "node": node, "message_id": message_id},
                )
            if len(stuck) < self.batch:
                break
        return total
