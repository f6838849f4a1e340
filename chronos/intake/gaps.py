"""Offset gaps: a consumed record whose offset is past the one that should come next in its
partition.

Kafka leaves gaps in a partition's offsets (transaction markers, aborted transactions,
compaction) and a consumer steps over them. But a broker can also answer a fetch with a later
batch than the one at the offset asked for, and then the consumer never asks for the skipped
records again: they are lost to intake. The embedded broker does this (docs/reliability.md,
"intake loss"): a produce reserves its offsets before it stores its batch, and a fetch served in
between, once a later batch (another producer's) is stored, returns the later one.

So intake reads a gap again before stepping over it: the partition's records from the gap on are
left out of the consumed batch (not stored, their offsets not stored) and the consumer seeks back
to the first missing offset. Records found there on the second read were skipped by the broker
(a warning, counted as ``recovered``); a gap found again is a real one (``confirmed``) and is
stepped over. Within ``RECHECK_INTERVAL_S`` of a real gap, the partition's gaps are stepped over
without a second read (``unchecked``): a topic with many real gaps costs at most one seek per
partition a second, while the broker's skips, however close together, are all read again. A gap
before the first record consumed after an assignment or a seek is not seen.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from prometheus_client import Counter

log = logging.getLogger("chronos.intake.loop")  # the intake loop's logger: one name for intake

RECHECK_INTERVAL_S = 1.0

OFFSET_GAPS = Counter(
    "chronos_intake_offset_gaps_total",
    "Gaps in the offsets of consumed input records, by outcome: recovered (read again, the "
    "broker had skipped records), confirmed (read again, a real gap), unchecked (not read "
    "again: within a second of a real gap in the partition)",
    ["outcome"],
)

Key = tuple[str, int]


class OffsetGaps:
    """Per assigned partition, the offset expected next; see the module doc."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.expected: dict[Key, int] = {}
        self.rereading: dict[Key, tuple[int, int]] = {}  # (first missing, first after the gap)
        self.last_confirmed: dict[Key, float] = {}  # when a re-read last found a real gap

    def forget(self, partitions: Iterable[Key]) -> None:
        """Partitions assigned, revoked or sought elsewhere: their next offset is unknown."""
        for key in partitions:
            self.expected.pop(key, None)
            self.rereading.pop(key, None)

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
            if key in dropping or not self._take(consumer, key, offset):
                if kept is None:
                    kept = list(records[:index])
                dropping.add(key)
                continue
            if kept is not None:
                kept.append(record)
        return records if kept is None else kept

    def _take(self, consumer: Consumer, key: Key, offset: int) -> bool:
        """Whether to take this record (False: the partition is being read again from the
        offset expected)."""
        reread = self.rereading.pop(key, None)
        if reread is not None:
            self._reread_outcome(key, offset, *reread)
        else:
            expected = self.expected.get(key)
            if (
                expected is not None
                and offset > expected
                and self._read_again(consumer, key, expected, offset)
            ):
                return False
        self.expected[key] = offset + 1
        return True

    def _read_again(self, consumer: Consumer, key: Key, expected: int, offset: int) -> bool:
        last = self.last_confirmed.get(key)
        if last is not None and self.clock() - last < RECHECK_INTERVAL_S:
            OFFSET_GAPS.labels("unchecked").inc()
            log.debug("offset gap in %s[%d]: %d..%d stepped over", *key, expected, offset - 1)
            return False
        try:
            consumer.seek(TopicPartition(key[0], key[1], expected))
        except KafkaException as exc:  # e.g. revoked meanwhile: its next owner reads it
            OFFSET_GAPS.labels("unchecked").inc()
            log.info("offset gap in %s[%d]: could not read it again: %s", *key, exc)
            return False
        self.rereading[key] = (expected, offset)
        log.debug(  # real gaps (transactions, compaction) are ordinary: not above debug
            "offset gap in %s[%d]: expected offset %d, got %d; reading from %d again",
            *key,
            expected,
            offset,
            expected,
            extra={"event": "offset_gap"},
        )
        return True

    def _reread_outcome(self, key: Key, offset: int, first: int, after: int) -> None:
        if offset < after:
            OFFSET_GAPS.labels("recovered").inc()
            log.warning(
                "the broker skipped offsets %d..%d of %s[%d] in a fetch; read again, they are "
                "there now",
                first,
                after - 1,
                *key,
                extra={"event": "offset_gap_recovered"},
            )
        else:
            self.last_confirmed[key] = self.clock()
            OFFSET_GAPS.labels("confirmed").inc()
            log.debug(
                "offset gap in %s[%d]: %d..%d holds no record; stepped over",
                *key,
                first,
                after - 1,
                extra={"event": "offset_gap_confirmed"},
            )
