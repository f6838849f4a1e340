"""The history records of the messages intake ends itself, without ever storing them: fired
directly because they arrived already due, expired on arrival (dead-lettered or dropped), or
refused by the database (dead-lettered or dropped, reason ``database_refused``). The firing loop
records what it ends in the statement that ends it; these have no such statement, so
``Settlement`` hands a settle pass's records (its delivered publishes', with their partition and
offset, and its drops') to ``ArrivalHistory.write``: one store call per pass, never one per
message, run on the enqueue statement's thread between two statements (its connection; the loop
never waits for it). With CHRONOS_HISTORY_FIRED=false the fired ones are left out there (a direct
publish still carries its record until it is delivered: one refused for good is dead-lettered,
and recorded so, with its lateness); a pass that only fired writes nothing.

A write that fails is never a reason to hold anything back: the batch's offsets are stored
before it is written, and the messages are delivered. Its records are counted in
``chronos_history_unrecorded_total``, logged (a line a minute) and not retried: they describe
messages already delivered, and keeping them for a retry would hold a growing buffer exactly while
Postgres is away (a write runs right after an enqueue statement that succeeded, so it is rare). A
crash between the offsets and the write loses that pass's records; a replayed batch records its
messages again, as it publishes them again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Executor, Future

from chronos.config.settings import Settings
from chronos.errors import StoreError
from chronos.observability import metrics
from chronos.observability.logs import Throttle
from chronos.protocol import Action, ScheduledMessage
from chronos.store import EndedOnArrival, Ending, Store
from chronos.store.history import DEAD_LETTERED, FIRED

log = logging.getLogger("chronos.intake.loop")  # the intake loop's logger: one name for intake


def arrival_record(
    message: ScheduledMessage, outcome: str, lateness_ms: int | None, reason: str | None = None
) -> EndedOnArrival:
    """The history record of ``message``, ended as it arrived (its topic, partition, offset and
    attempt are added once its publish is delivered: ``delivered_record``)."""
    return EndedOnArrival(
        message.id,
        message.tenant,
        message.deadline,
        Ending(outcome, None, None, None, lateness_ms, reason),
        recurring=message.recurrence is not None,
        key=message.key,
    )


def refused_record(message: ScheduledMessage) -> EndedOnArrival | None:
    """The history record of a message the database refused to store (dead-lettered, or dropped
    without a dead-letter topic); None for a cancel, which ends no message."""
    if message.action is Action.CANCEL:
        return None
    return arrival_record(message, DEAD_LETTERED, None, "database_refused")


class ArrivalHistory:
    """Writes intake's history records (``on``: CHRONOS_HISTORY_TTL is not 0; off, nothing is
    written; ``fired``: CHRONOS_HISTORY_FIRED, false leaves the fired ones out) on ``executor``,
    the enqueue statement's single thread."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        executor: Executor,
        away: Callable[[], bool] = lambda: False,
    ) -> None:
        self.on = bool(settings.history_ttl)
        self.away = away  # its database (shard 0's) found away: the records are not written
        self.fired = settings.history_fired
        self.node = settings.node_id
        self.store = store
        self.executor = executor
        self.failures = Throttle()  # a database away repeats them: one line a minute
        self.last: Future[None] | None = None  # the latest write (writes run in order)

    def write(self, ended: list[EndedOnArrival]) -> None:
        """Write these records in one store call, after the statement under way; never raises
        and never waits."""
        if self.on and not self.fired:
            ended = [e for e in ended if e.ending.outcome != FIRED]
        if not self.on or not ended:
            return
        if self.away():  # not waited for: the other shards' batches come first
            self._lost(len(ended), StoreError("shard 0's database is away", outage=True))
            return
        try:
            self.last = self.executor.submit(self._write, ended)
        except RuntimeError as exc:  # the executor is shut down: intake has stopped
            self._lost(len(ended), exc)

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the writes submitted so far (tests; a stop waits for the executor)."""
        if self.last is not None:
            self.last.result(timeout)

    def _write(self, ended: list[EndedOnArrival]) -> None:
        try:
            self.store.record_ended(self.node, ended)
        except StoreError as exc:
            self._lost(len(ended), exc)
        except Exception as exc:  # a bug: never silent in a future nobody reads
            self._lost(len(ended), exc)
            log.exception("writing intake's history records failed")

    def _lost(self, count: int, why: BaseException) -> None:
        metrics.HISTORY_UNRECORDED.inc(count)
        log.log(
            self.failures.level(),
            "%d history records of messages intake ended on arrival were not written (not "
            "retried; the messages are delivered): %s",
            count,
            why,
            extra={"event": "history_unrecorded", "statement": "record_ended"},
        )
