"""Offset gaps: a consumed record whose offset is past the one that should come next in its
partition.

Kafka leaves gaps in a partition's offsets (transaction markers, aborted transactions,
compaction) and a consumer steps over them. But a broker can also answer a fetch with a later
batch than the one at the offset asked for, and then the consumer never asks for the skipped
records again: they are lost to intake. The Kafka-protocol imitation (``chronos dev --broker
tansu``) does this (docs/reliability.md, "intake loss"): a produce reserves its offsets before it
stores its batch, and a fetch served in between, once a later batch (another producer's) is
stored, returns the later one. Apache Kafka never did where it was measured: there the check sees
only real gaps, and a ``recovered`` count would be the sign of a broker that does.

So intake never steps over a gap on one answer. The partition's records from the gap on are
left out of the consumed batch (not stored, their offsets not stored) and the consumer seeks back
to the first missing offset. The first record of that second read is compared with the gap's
start:

- it is the first missing record: the broker had skipped records (``recovered``, a warning); the
  records after it are checked as usual, so a gap only partly filled is read again;
- it is later, but earlier than before (the broker is storing the skipped records): read again
  at once (at most ``IMMEDIATE_REREADS`` times, then at the settle pace);
- it is the same answer as before: the broker may still be between reserving and storing the
  missing batch, so the partition is read again once ``SETTLE_S`` has passed since that answer
  (its records meanwhile are left out); the same answer from a read started that late is the
  broker's own: the offsets hold no record for this consumer (``confirmed``) and are stepped
  over.

A real gap costs two seeks and at most ``SETTLE_S`` of its partition's records; the other
partitions go on meanwhile. A gap before the first record consumed after an assignment is not
seen (no offset is expected yet).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from prometheus_client import Counter

log = logging.getLogger("chronos.intake.loop")  # the intake loop's logger: one name for intake

SETTLE_S = 0.1  # an answer this old, given again by a later read, is the broker's own
IMMEDIATE_REREADS = 3  # of a gap whose answer moves, before reads wait SETTLE_S

OFFSET_GAPS = Counter(
    "chronos_intake_offset_gaps_total",
    "Gaps in the offsets of consumed input records, by outcome: recovered (read again, the "
    "broker had skipped records), confirmed (read again after it settled, a real gap)",
    ["outcome"],
)
GAP_REREADS = Counter(
    "chronos_intake_offset_gap_rereads_total",
    "Seeks back to the first missing offset of a gap in the consumed input records",
)

Key = tuple[str, int]


class Take(Enum):
    RECORD = 1  # take it
    SKIP = 2  # leave this record out (already taken), the next ones are checked
    DROP = 3  # leave it and the partition's next records of this batch out: read again


@dataclass
class Gap:
    first: int  # the first missing offset (where reads start)
    answer: int  # the first offset the last read gave after it
    answered_at: float  # when that answer came
    read_at: float  # when the read under way started (its seek)
    reads: int = 0  # seeks back to ``first`` so far
    due: float | None = None  # when the next seek is due (None: a read is under way)


class OffsetGaps:
    """Per assigned partition, the offset expected next and its gap being read again; see the
    module doc."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.expected: dict[Key, int] = {}
        self.gaps: dict[Key, Gap] = {}

    def forget(self, partitions: Iterable[Key]) -> None:
        """Partitions assigned, revoked or sought elsewhere: their next offset is unknown."""
        for key in partitions:
            self.expected.pop(key, None)
            self.gaps.pop(key, None)

    def reread_due(self, consumer: Consumer, wait: float) -> float:
        """Seek back to the gaps whose settle time has passed (call before each consume); the
        consume's ``wait``, shortened to the next gap due."""
        now = self.clock()
        for key, gap in self.gaps.items():
            if gap.due is not None and gap.due <= now:
                self._seek(consumer, key, gap)
            if gap.due is not None:
                wait = min(wait, max(0.0, gap.due - now))
        return wait

    def check(self, consumer: Consumer, records: list[Message]) -> list[Message]:
        """The records to take from a consumed batch: all of them, unless a partition skipped
        offsets; then that partition's records from the gap on are left out and read again."""
        kept: list[Message] | None = None  # a copy only once a record is left out
        dropping: set[Key] = set()
        for index, record in enumerate(records):
            if record.error() is not None:
                if kept is not None:
                    kept.append(record)
                continue
            key = (str(record.topic()), int(record.partition() or 0))
            offset = int(record.offset() or 0)
            take = Take.DROP if key in dropping else self._take(consumer, key, offset)
            if take is not Take.RECORD:
                if kept is None:
                    kept = list(records[:index])
                if take is Take.DROP:
                    dropping.add(key)
                continue
            if kept is not None:
                kept.append(record)
        return records if kept is None else kept

    def _take(self, consumer: Consumer, key: Key, offset: int) -> Take:
        gap = self.gaps.get(key)
        if gap is not None:
            if gap.due is not None:
                return Take.DROP  # read ahead while the gap settles: read again after it
            take = self._answer(consumer, key, gap, offset)
        else:
            expected = self.expected.get(key)
            if expected is None or offset <= expected:
                take = Take.RECORD
            else:
                now = self.clock()
                gap = self.gaps[key] = Gap(expected, offset, now, now)
                log.debug(  # real gaps (transactions, compaction) are ordinary: not above debug
                    "offset gap in %s[%d]: expected offset %d, got %d; reading from %d again",
                    *key,
                    expected,
                    offset,
                    expected,
                    extra={"event": "offset_gap"},
                )
                self._seek(consumer, key, gap)
                return Take.DROP
        if take is Take.RECORD:
            self.expected[key] = offset + 1
        return take

    def _answer(self, consumer: Consumer, key: Key, gap: Gap, offset: int) -> Take:
        """The first record of a read from the gap's first missing offset."""
        if offset < gap.first:
            return Take.SKIP  # from before the seek: taken already
        now = self.clock()
        if offset == gap.first:
            del self.gaps[key]
            OFFSET_GAPS.labels("recovered").inc()
            log.warning(
                "the broker skipped offset %d of %s[%d] in a fetch (the next record it gave was "
                "at %d); read again, it is there now",
                gap.first,
                *key,
                gap.answer,
                extra={"event": "offset_gap_recovered"},
            )
            return Take.RECORD
        if offset >= gap.answer and gap.read_at >= gap.answered_at + SETTLE_S:
            del self.gaps[key]
            OFFSET_GAPS.labels("confirmed").inc()
            log.debug(
                "offset gap in %s[%d]: %d..%d holds no record; stepped over",
                *key,
                gap.first,
                offset - 1,
                extra={"event": "offset_gap_confirmed"},
            )
            return Take.RECORD
        if offset < gap.answer and gap.reads <= IMMEDIATE_REREADS:
            gap.answer, gap.answered_at = offset, now  # records appeared: read again at once
            self._seek(consumer, key, gap)
        else:
            if offset < gap.answer:
                gap.answer, gap.answered_at = offset, now
            gap.due = gap.answered_at + SETTLE_S  # the same answer: once it has settled
        return Take.DROP

    def _seek(self, consumer: Consumer, key: Key, gap: Gap) -> None:
        gap.read_at, gap.due = self.clock(), None
        try:
            consumer.seek(TopicPartition(key[0], key[1], gap.first))
        except KafkaException as exc:  # e.g. revoked meanwhile (then forgotten): try again
            gap.due = gap.read_at + SETTLE_S
            log.info("offset gap in %s[%d]: could not read it again yet: %s", *key, exc)
            return
        gap.reads += 1
        GAP_REREADS.inc()
