"""Failure detection and recovery, run by the leader alone (see ``chronos.cluster.leadership``).

Each sweep first takes over at once the claims of nodes whose heartbeat is older than the
liveness window (``reset_lapsed_claims``: one compare-and-set statement per batch, never this
node's own claims), then resets rows claimed longer ago than the hold time, the fallback.

The design's two queries: first find rows whose ``readied_at`` is past the hold time (on the
database clock), then reset each only if its claim is still the one observed (compare-and-set on
``readied_by`` and ``readied_at``), logging "suspected failure of {node} for message {id}". Rows
another node reset meanwhile, or that their owner finished, are left alone. It repeats while it
finds full batches, so any number of stuck rows is reset in one sweep.

While this node's own writes to Kafka fail, it runs no hold-time sweep (what it took over it
could not fire either); a dead node's claims are still taken over at once.

A stall of the database is no peer's death (``Leadership.stalled_within``): when this node saw the
database stall (its heartbeat held up, or its statements failing), it judges by a liveness window
and a hold time lengthened by the stall, so peers get a whole window of fresh heartbeats and a
whole hold time to finish (deliver, delete) their claims before any is taken over. Otherwise, when
every node's statements hang together past the window or the hold time, the leader would take over
its live peers' claims the moment the database resumes, and they still fire them.

A node never suspects itself: the claims this very process made (its node id, claimed since it
started on the database clock) are skipped. A slow statement of its own firing loop is no
failure; its firing loop gives back the claims it held past the hold time (fenced), and rows it
already produced are deleted when delivered.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from datetime import datetime
from typing import ParamSpec, TypeVar

from chronos.cluster.leadership import Leadership
from chronos.config.settings import Settings
from chronos.errors import StoreError
from chronos.observability import metrics
from chronos.observability.dependencies import KAFKA_WRITES
from chronos.runtime.loop import Loop
from chronos.store import Store

log = logging.getLogger(__name__)
_T = TypeVar("_T")
_P = ParamSpec("_P")

SWEEP_BATCH = 5000


class RecoveryLoop(Loop):
    name = "recovery"

    def __init__(
        self,
        settings: Settings,
        store: Store,
        leadership: Leadership,
        batch: int = SWEEP_BATCH,
        *,
        claims_since: datetime | None = None,
    ):
        super().__init__()
        self.settings = settings
        self.own = (settings.node_id, claims_since)  # None: every claim of this node id
        self.store = store
        self.leadership = leadership
        self.batch = batch
        self.lengthened: dict[int, bool] = {}  # span (ms) -> judged lengthened by a stall now

    def run(self) -> None:
        interval = self.settings.failure_detection_interval_ms / 1000
        while not self.stopping.is_set():
            self.alive_at = time.monotonic()
            started = time.monotonic()
            try:
                self.run_once()
            except StoreError as exc:  # try again next interval
                metrics.DATABASE_ERRORS.labels("recovery").inc()
                log.log(
                    exc.log_level,
                    "failure detection sweep failed: %s",
                    exc,
                    extra={"event": "database_error"},
                )
            elapsed = time.monotonic() - started
            if self.wait(max(0.0, interval - elapsed) + random.uniform(0, 0.1 * interval)):
                break

    def run_once(self) -> int:
        """On the leader: take over the claims of dead nodes, then sweep by the hold time.
        Elsewhere nothing (but a look at who leads). Returns how many rows were reset."""
        if not self.leadership.is_leader():
            # The monitor elects after each heartbeat (every second); look again on this loop's
            # own cadence too, so a dead leader is replaced within one detection interval of
            # its heartbeat lapsing.
            window_ms = self.settings.liveness_window_ms
            self.leadership.elected(self._timed(self.store.elect_leader, window_ms))
            if not self.leadership.is_leader():
                return 0
        taken = self.take_over()
        if KAFKA_WRITES.down:
            # This node's own writes fail (no leader, too few in-sync replicas): a row stuck in a
            # peer's hands could not be fired here either, and each reset adds an attempt that
            # can leave a copy (a leader appends what it cannot commit). The hold-time sweep
            # waits until this node delivers again; a dead node's claims are still taken over.
            return taken
        return taken + self.sweep()

    def _timed(self, statement: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """Run one statement, telling the leadership whether the database answered (a failed
        one is a stall, as this node sees it, until one succeeds; a slow one is not: a sweep's
        batch of 5,000 rows may take its time)."""
        sent_at = self.leadership.monotonic()
        try:
            result = statement(*args, **kwargs)
        except StoreError:
            self.leadership.unanswered(sent_at)
            raise
        self.leadership.answered(sent_at, timed=False)
        return result

    def _lengthened_ms(self, span_ms: int) -> int:
        """``span_ms`` (the liveness window, the hold time) plus what the database's stalls took
        of it lately (see ``Leadership.stalled_within``), logged once per stall."""
        stalled_s = self.leadership.stalled_within(span_ms / 1000)
        was_lengthened = any(self.lengthened.values())
        self.lengthened[span_ms] = stalled_s > 0
        if stalled_s and not was_lengthened:
            log.info(
                "the database stalled for %.1f s: claims and heartbeats are judged that much "
                "later, so that live peers catch up first",
                stalled_s,
                extra={"event": "database_stalled", "seconds": round(stalled_s, 3)},
            )
        return span_ms + round(stalled_s * 1000)

    def take_over(self) -> int:
        """Reset the claims of nodes whose heartbeat lapsed; returns how many were reset."""
        done: list[tuple[str, str]] = []
        window_ms = self._lengthened_ms(self.settings.liveness_window_ms)
        while not self.stopping.is_set():
            reset = self._timed(
                self.store.reset_lapsed_claims, window_ms, self.settings.node_id, self.batch
            )
            done.extend(reset)
            if len(reset) < self.batch:
                break
        self._suspected(done, "heartbeat_lapsed")  # logged once all are reset: no delay
        return len(done)

    def _suspected(self, reset: list[tuple[str, str]], cause: str) -> None:
        metrics.SUSPECTED_FAILURES.inc(len(reset))
        for message_id, node in reset:
            log.warning(
                "suspected failure of %s for message %s",
                node,
                message_id,
                extra={
                    "event": "suspected_failure",
                    "node": node,
                    "message_id": message_id,
                    "cause": cause,
                },
            )

    def sweep(self) -> int:
        """One hold-time sweep; returns how many rows were reset."""
        done: list[tuple[str, str]] = []
        hold_ms = self._lengthened_ms(self.settings.hold_time_ms)
        while not self.stopping.is_set():
            stuck = self._timed(self.store.find_stuck, hold_ms, self.batch, self.own)
            if not stuck:
                break
            done.extend(self._timed(self.store.reset_stuck, stuck))
            if len(stuck) < self.batch:
                break
        self._suspected(done, "hold_time")  # logged once all are reset: no delay
        return len(done)
