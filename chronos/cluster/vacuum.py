"""The leader's vacuum of the messages table: every ``CHRONOS_VACUUM_INTERVAL_MS`` (5 s) while
this node leads its shard, on a thread and a database connection of its own.

Every message leaves dead row versions behind it (its claim's update, its delete) and a dead
entry in the ready index, which every claim walks from its oldest end. Postgres's autovacuum
visits a database once a minute at its defaults (``autovacuum_naptime``): at 10,000 msg/s one
node's claims walked up to a minute of dead entries, slowed as they piled up, fell behind their
lookahead, and messages fired late in stretches of seconds that ended when the autovacuum came
(docs/benchmark-results.md, "Between two autovacuums"). So the leader vacuums the table itself
once it holds ``MIN_DEAD_ROWS`` dead row versions (the statistics' count), and at most a
tenth of the time (``BUSY_SHARE``: a large table's vacuum reads its indexes whole): ``VACUUM
(SKIP_LOCKED)``, without ANALYZE (the statistics stay autovacuum's, as do the other tables), and
a table an autovacuum is already on is skipped, not waited for. It never delays the heartbeat (its
own thread) and never counts as a stuck statement (its time follows the table's size). A role that
does not own the table (or, from Postgres 17, holds no MAINTAIN grant on it) cannot vacuum it
(Postgres would skip it with a warning): that is said once, and the table is left to autovacuum;
``CHRONOS_VACUUM_INTERVAL_MS=0`` leaves it to autovacuum from the start. Unlike an autovacuum,
a vacuum under way is not cancelled by a migration's lock on the table: the migration waits for
it (the vacuum's duration at most; an index built CONCURRENTLY meanwhile makes the next rounds
skip the table).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from chronos.errors import StoreError
from chronos.observability import metrics
from chronos.store import Store

log = logging.getLogger(__name__)

MIN_DEAD_ROWS = 1_000
"""Dead row versions below which a round does nothing (an idle table is never vacuumed)."""
BUSY_SHARE = 0.1
"""At most this share of the time vacuuming: after a vacuum of ``s`` seconds the next round
waits ``s / BUSY_SHARE`` at least (a table of millions of rows, whose indexes each vacuum reads
whole, is vacuumed less often than every interval)."""


class Vacuum:
    """The messages table's vacuum, run by the leader of its shard (``start`` once; ``tick``
    is one round, for the tests)."""

    def __init__(
        self, store: Store, interval_ms: int, leading: Callable[[], bool], shard: int = 0
    ) -> None:
        self.store = store
        self.interval_s = interval_ms / 1000
        self.leading = leading
        self.shard = shard
        self.refused = False  # this role may not vacuum the table: left to autovacuum
        self.runs = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.interval_s <= 0:
            return
        self._thread = threading.Thread(target=self._run, name="chronos-vacuum", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the rounds; a vacuum under way is not waited for beyond ``timeout`` (it ends
        with its connection when the process does)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        wait = self.interval_s
        while not self._stop.wait(wait):
            wait = self.interval_s
            if not self.leading():
                continue
            started = time.monotonic()
            try:
                if self.tick():
                    wait = max(wait, (time.monotonic() - started) / BUSY_SHARE)
            finally:
                # A connection of its own each round: one left idle between rounds would be
                # found broken only at the next round after an outage, and report the database
                # away again after every other connection found it back.
                release = getattr(self.store, "release_thread_connection", None)
                if release is not None:
                    release()

    def tick(self) -> bool:
        """One round: vacuum if the table has enough dead row versions; True if it did."""
        if self.refused:
            return False
        try:
            dead, may_vacuum = self.store.dead_messages()
            if not may_vacuum:
                self.refused = True
                log.warning(
                    "shard %d: this role may not vacuum chronos_messages, so the leader cannot "
                    "vacuum it every %.0f s: it is left to Postgres's autovacuum (at its "
                    "defaults once a minute, and a busy table's claims slow down in between: "
                    "see docs/sizing.md); GRANT MAINTAIN ON chronos_messages to this role "
                    "(Postgres 17 and later), or set CHRONOS_VACUUM_INTERVAL_MS=0",
                    self.shard,
                    self.interval_s,
                    extra={"event": "vacuum_refused", "shard": self.shard},
                )
                return False
            if dead < MIN_DEAD_ROWS:
                return False
            started = time.monotonic()
            self.store.vacuum_messages()
        except StoreError as exc:
            metrics.DATABASE_ERRORS.labels("vacuum").inc()
            log.log(
                exc.log_level,
                "shard %d: vacuum of chronos_messages failed: %s (tried again in %.0f s)",
                self.shard,
                exc,
                self.interval_s,
                extra={"event": "vacuum_failed", "shard": self.shard},
            )
            return False
        seconds = time.monotonic() - started
        self.runs += 1
        metrics.VACUUM_DURATION.observe(seconds)
        log.debug(
            "shard %d: chronos_messages vacuumed (%d dead row versions) in %.3f s",
            self.shard,
            dead,
            seconds,
            extra={"event": "vacuum", "shard": self.shard, "dead": dead},
        )
        return True
