"""Fakes of the Kafka side: the publisher the firing loop produces to and the consumer intake
reads from (re-exported by :mod:`chronos.testing`).

``FakePublisher`` implements :class:`chronos.kafka.Publisher`: it records every produced record
and lets a test decide whether each delivery succeeds or fails, and when its report arrives.
``FakeConsumer`` feeds records to the intake loop and records the offsets it stores.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from chronos.kafka import DeliveryCallback
from chronos.protocol import Headers

__all__ = ["FakeConsumer", "FakePublisher", "ProducedRecord", "make_record"]


# -------------------------------------------------------------------------------- publisher


PENDING = "pending"
DELIVERED = "delivered"
FAILED = "failed"


@dataclass(eq=False)
class ProducedRecord:
    """One ``produce`` call as the fake publisher saw it."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int  # the producer's wall clock at produce(), like a record's CreateTime
    status: str = PENDING  # pending -> delivered | failed (decided), then reported
    error: KafkaError | None = None
    reported: bool = False  # whether its delivery callback has been served
    on_delivery: DeliveryCallback | None = field(default=None, repr=False)
    offset: int = 0  # its place among the records produced to its topic (from 0)


Decision = Callable[[ProducedRecord], KafkaError | None]


def _succeed(_record: ProducedRecord) -> KafkaError | None:
    return None


class FakePublisher:
    """A ``Publisher`` that records what is produced; the test decides each delivery.

    * ``auto=True`` (default): ``decide(record)`` is asked at ``produce`` time (default: success;
      return a ``KafkaError`` to fail it) and the report is served by the next ``poll``/``flush``,
      like a real producer's.
    * ``auto=False``: every record stays pending until the test calls ``deliver(...)`` or
      ``fail(...)``; ``poll`` then serves the report.
    * ``fail_next(n, code)`` fails the next ``n`` produced records (either mode).

    ``poll(timeout)`` waits up to ``timeout`` for a report to serve (so loops on threads do not
    spin) and returns the number of callbacks served. ``delivered`` lists what a consumer of the
    topics would now see.
    """

    def __init__(
        self,
        *,
        auto: bool = True,
        decide: Decision | None = None,
        wall_clock: Callable[[], float] = time.time,
    ):
        self.auto = auto
        self.decide = decide or _succeed
        self.wall_clock = wall_clock
        self.records: list[ProducedRecord] = []
        self._fail_next: list[KafkaError] = []
        self._cond = threading.Condition(threading.RLock())
        self.position = (-1, -1)  # (0, record.offset) in a callback
        self._offsets: dict[str, int] = {}
        self.warm_ok = True  # what ``warm`` answers (False: the broker does not answer yet)
        self.warmed: list[str] = []  # the topics ``warm`` was asked about
        self.replaced: list[str] = []  # the causes ``replace`` was given

    # -- test controls ---------------------------------------------------------------------------

    def fail_next(self, count: int = 1, code: int = KafkaError._MSG_TIMED_OUT) -> None:
        with self._cond:
            self._fail_next.extend(KafkaError(code) for _ in range(count))

    def pending(self) -> list[ProducedRecord]:
        with self._cond:
            return [r for r in self.records if r.status == PENDING]

    def deliver(self, records: Iterable[ProducedRecord] | None = None) -> int:
        """Decide success for ``records`` (default: every pending one)."""
        return self._settle(records, None)

    def fail(
        self, records: Iterable[ProducedRecord] | None = None, code: int = KafkaError._MSG_TIMED_OUT
    ) -> int:
        """Decide failure with ``code`` for ``records`` (default: every pending one)."""
        return self._settle(records, KafkaError(code))

    def _settle(self, records: Iterable[ProducedRecord] | None, error: KafkaError | None) -> int:
        with self._cond:
            chosen = list(records) if records is not None else self.pending()
            count = 0
            for record in chosen:
                if record.status != PENDING:
                    raise ValueError(f"record already {record.status}")
                record.status, record.error = (
                    (FAILED, error) if error is not None else (DELIVERED, None)
                )
                count += 1
            self._cond.notify_all()
            return count

    def delivered(self, topic: str | None = None) -> list[ProducedRecord]:
        with self._cond:
            return [r for r in self.records if r.status == DELIVERED and topic in (None, r.topic)]

    def produced(self, topic: str | None = None) -> list[ProducedRecord]:
        with self._cond:
            return [r for r in self.records if topic in (None, r.topic)]

    # -- the Publisher interface -----------------------------------------------------------------

    def produce(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        on_delivery: DeliveryCallback,
    ) -> None:
        record = ProducedRecord(
            topic=topic,
            key=key,
            value=value,
            headers=list(headers or ()),
            timestamp_ms=math.floor(self.wall_clock() * 1000 + 1e-6),  # float noise, not time
            on_delivery=on_delivery,
        )
        with self._cond:
            record.offset = self._offsets.get(topic, 0)
            self._offsets[topic] = record.offset + 1
            self.records.append(record)
            if self._fail_next:
                record.status, record.error = FAILED, self._fail_next.pop(0)
            elif self.auto:
                error = self.decide(record)
                record.status, record.error = (
                    (FAILED, error) if error is not None else (DELIVERED, None)
                )
            self._cond.notify_all()

    def _ready(self) -> list[ProducedRecord]:
        return [r for r in self.records if r.status != PENDING and not r.reported]

    def poll(self, timeout: float) -> int:
        with self._cond:
            if timeout > 0 and not self._ready():
                self._cond.wait_for(lambda: bool(self._ready()), timeout)
            ready = self._ready()
            for record in ready:
                record.reported = True
        for record in ready:  # callbacks run outside the lock, like librdkafka's
            if record.on_delivery is not None:
                if record.error is None:
                    self.position = (0, record.offset)
                record.on_delivery(record.error)
        return len(ready)

    def flush(self, timeout: float) -> int:
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            self.poll(0)
            outstanding = len(self)
            remaining = deadline - time.monotonic()
            if outstanding == 0 or remaining <= 0:
                return outstanding
            self.poll(min(remaining, 0.05))

    def warm(self, topic: str, timeout: float) -> bool:
        self.warmed.append(topic)
        return self.warm_ok

    def replace(self, cause: str) -> None:
        """As the real publisher: every record not yet decided fails (purged), reported by the
        next poll; the causes are kept in ``replaced``."""
        with self._cond:
            self.replaced.append(cause)
            for record in self.records:
                if record.status == PENDING:
                    record.status = FAILED
                    record.error = KafkaError(KafkaError._PURGE_INFLIGHT)
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return sum(1 for r in self.records if not r.reported)


# --------------------------------------------------------------------------------- consumer


def make_record(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] | None = None,
    *,
    error: KafkaError | None = None,
) -> Message:
    """A consumed record, as the intake loop receives it from the consumer."""
    return Message(
        topic=topic,
        partition=partition,
        offset=offset,
        key=key,
        value=value,
        headers=list(headers) if headers is not None else None,
        error=error,
    )


class _Committed(dict[tuple[str, int], int]):
    """The offsets committed so far, by (topic, partition); called as ``Consumer.committed``,
    the committed offset of each partition asked for (-1001, none yet)."""

    def __call__(self, partitions: list[TopicPartition], timeout: float = -1) -> list[Any]:
        return [
            TopicPartition(p.topic, p.partition, self.get((p.topic, p.partition), -1001))
            for p in partitions
        ]


class FakeConsumer:
    """The part of a confluent-kafka ``Consumer`` the intake loop uses, fed by the test.

    ``feed(records)`` queues records; ``consume`` hands them out in order, at most
    ``num_messages`` at a time, waiting up to ``timeout`` for some. ``stored`` holds the offsets
    stored so far, by (topic, partition): the next offset to read, as Kafka commits them.
    ``seek`` hands out again every record fed for that partition from that offset on (in place
    of its records still queued); ``seeks`` lists them.

    The group: after ``subscribe``, the first ``consume`` serves the assignment callback with an
    empty assignment (the group joined; the test assigns itself what it feeds), as librdkafka
    serves a rebalance inside a poll. ``joined=False`` holds it back until the test calls
    ``rebalance(partitions)`` (served by the next ``consume``). ``revoke(partitions)`` takes
    partitions away (the ``on_revoke`` callback), ``revoke(partitions, lost=True)`` loses them
    (``on_lost``, else ``on_revoke``, as librdkafka does), both served by the next ``consume`` in
    the order they were asked for.
    """

    def __init__(self, *, joined: bool = True, **callbacks: Any):
        self.callbacks = callbacks
        self._on_assign: Any = None
        self._on_revoke: Any = None
        self._on_lost: Any = None
        # The group's events not served yet: ("assign" | "revoke" | "lost", partitions).
        self._events: list[tuple[str, list[TopicPartition]]] = [("assign", [])] if joined else []
        self.subscribed: list[str] = []
        self.stored: dict[tuple[str, int], int] = {}
        self.committed = _Committed()
        self.assigned: list[tuple[str, int, int]] = []  # what the loop assigned itself
        self.closed = False
        self.seeks: list[tuple[str, int, int]] = []
        self.paused: set[tuple[str, int]] = set()  # not served until resumed
        self._positions: dict[tuple[str, int], int] = {}  # the next offset of each partition
        self._fed: list[Message] = []
        self._queue: list[Message] = []
        self._cond = threading.Condition()

    def feed(self, records: Iterable[Message]) -> None:
        with self._cond:
            records = list(records)
            self._fed.extend(records)
            self._queue.extend(records)
            self._cond.notify_all()

    def seek(self, partition: TopicPartition) -> None:
        topic, number, offset = partition.topic, partition.partition, partition.offset
        self.seeks.append((topic, number, offset))

        def of_partition(m: Message) -> bool:
            return m.topic() == topic and m.partition() == number

        with self._cond:
            again = [m for m in self._fed if of_partition(m) and (m.offset() or 0) >= offset]
            self._queue = [m for m in self._queue if not of_partition(m)] + again
            self._cond.notify_all()

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.subscribed = list(topics)
        self._on_assign = callbacks.get("on_assign")
        self._on_revoke = callbacks.get("on_revoke")
        self._on_lost = callbacks.get("on_lost") or self._on_revoke

    def rebalance(self, partitions: Iterable[TopicPartition] = ()) -> None:
        """The group assigns ``partitions`` to this member (served by the next ``consume``)."""
        with self._cond:
            self._events.append(("assign", list(partitions)))
            self._cond.notify_all()

    def revoke(self, partitions: Iterable[TopicPartition], *, lost: bool = False) -> None:
        """The group takes ``partitions`` away (``lost``: the assignment was lost), served by the
        next ``consume``; their records still queued are dropped, as librdkafka drops them."""
        partitions = list(partitions)
        gone = {(p.topic, p.partition) for p in partitions}
        with self._cond:
            self._events.append(("lost" if lost else "revoke", partitions))
            self._queue = [m for m in self._queue if (m.topic(), m.partition()) not in gone]
            self._cond.notify_all()

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        with self._cond:
            events, self._events = self._events, []
        if self._on_assign is not None:
            served = {"assign": self._on_assign, "revoke": self._on_revoke, "lost": self._on_lost}
            for kind, partitions in events:
                if served[kind] is not None:
                    served[kind](self, partitions)
        elif events:  # not subscribed (yet): kept for the first consume after it
            with self._cond:
                self._events[:0] = events
        with self._cond:
            if not self._servable() and timeout != 0:
                self._cond.wait_for(
                    lambda: bool(self._servable()), None if timeout < 0 else timeout
                )
            batch = self._servable()[:num_messages]
            taken = {id(m) for m in batch}
            self._queue = [m for m in self._queue if id(m) not in taken]
            for m in batch:
                self._positions[(m.topic() or "", m.partition() or 0)] = (m.offset() or 0) + 1
            return batch

    def _servable(self) -> list[Message]:
        return [m for m in self._queue if (m.topic(), m.partition()) not in self.paused]

    def pause(self, partitions: list[TopicPartition]) -> None:
        with self._cond:
            self.paused |= {(p.topic, p.partition) for p in partitions}

    def resume(self, partitions: list[TopicPartition]) -> None:
        with self._cond:
            self.paused -= {(p.topic, p.partition) for p in partitions}
            self._cond.notify_all()

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """The next offset of each partition (-1001, OFFSET_INVALID: nothing served yet)."""
        return [
            TopicPartition(p.topic, p.partition, self._positions.get((p.topic, p.partition), -1001))
            for p in partitions
        ]

    def store_offsets(self, offsets: list[TopicPartition] | None = None, **_: Any) -> None:
        for tp in offsets or ():
            self.stored[(tp.topic, tp.partition)] = tp.offset

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned += [(p.topic, p.partition, p.offset) for p in partitions]

    assign = incremental_assign

    def commit(self, asynchronous: bool = True, **_: Any) -> None:
        pending = {k: v for k, v in self.stored.items() if self.committed.get(k) != v}
        if not pending:
            raise KafkaException(KafkaError(KafkaError._NO_OFFSET))
        self.committed.update(pending)

    def close(self) -> None:
        self.closed = True
