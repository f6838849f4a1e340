"""Committing the intake's stored offsets: every ``COMMIT_INTERVAL_MS``, one commit at a time.

librdkafka's own timer (``auto.commit.interval.ms``) sends a commit every interval whether the
last one was answered or not. A group coordinator answers a commit only once every in-sync
replica of the offsets topic has it (``offsets.commit.timeout.ms``, 5 s at most), and a broker
serves one request of a connection at a time: while a replica of the offsets topic is dead and
not yet fenced, each commit takes those 5 s, the timer queues five more a second on the
coordinator's connection, and the consumer's heartbeats wait behind all of them. The session then
ends although the coordinator is alive (every node loses its partitions, waits out a rebalance,
and replays what the group had not committed). So the intake commits itself, never with one
unanswered: a heartbeat waits behind one commit at most. librdkafka's timer stays on as a
backstop every ``BACKSTOP_COMMIT_INTERVAL_MS``, and librdkafka still commits the offsets of
partitions revoked from this node before it hands them over.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, Protocol

from confluent_kafka import KafkaError, KafkaException

from chronos.kafka.config import COMMIT_INTERVAL_MS

# An answer not seen for this long (a commit deferred while no coordinator is known, then lost
# with the group) no longer holds the next commit back.
UNANSWERED_S = 30.0
# What a commit may answer while the group rebalances or after this member left it: the next
# commit, of the new generation, carries the same offsets.
REBALANCING = frozenset(
    {
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.ILLEGAL_GENERATION,
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError._ASSIGNMENT_LOST,
    }
)


class Committing(Protocol):
    def commit(self, *, asynchronous: Literal[True]) -> None: ...


class OffsetCommits:
    """When to commit: ``due`` on every pass of the intake loop, ``answered`` from the
    consumer's commit callback (served by the same loop's polls)."""

    def __init__(
        self,
        interval_s: float = COMMIT_INTERVAL_MS / 1000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.sent_at: float | None = None  # the commit awaiting its answer
        self.last_at = -interval_s

    def due(self, consumer: Committing) -> bool:
        """Commit the stored offsets if the interval has passed and no commit awaits its
        answer. True if one was sent."""
        now = self.clock()
        if self.sent_at is not None and now - self.sent_at < UNANSWERED_S:
            return False
        if now - self.last_at < self.interval_s:
            return False
        self.last_at = now
        try:
            consumer.commit(asynchronous=True)
        except KafkaException:
            self.sent_at = None  # refused at once (nothing assigned): no answer will come
            return False
        self.sent_at = now
        return True

    def answered(self) -> None:
        self.sent_at = None


def quiet(err: KafkaError | None) -> bool:
    """A commit's outcome not worth a warning: none stored since the last one, or the group
    rebalancing (committed again by the next one)."""
    return err is None or err.code() == KafkaError._NO_OFFSET or err.code() in REBALANCING
