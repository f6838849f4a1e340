"""The dead-letter topic: read it (each record's reason, code, source, original headers, when)
and what its replay markers name. Replaying is chronos.admin.deadletters.replay.

A dead letter is its original record (key, value, headers) plus the headers Chronos added
(``chronosDeadLetterReason``, ``chronosDeadLetterSource``, ``chronosDeadLetterCode``, when
reduced ``chronosDeadLetterReduced`` and, for a scheduled message that expired or could not be
published, what a replay needs to schedule it again: ``chronosDeadLetterMessageId``,
``chronosDeadLetterDeadline``, ``chronosDeadLetterTopic``, ``chronosDeadLetterTenant``).

What has been replayed is written to the dead-letter topic itself: one *replay marker* per
partition and replayed batch, a record without key or value whose header
``chronosDeadLetterReplayed`` lists the offsets replayed (``12,13,40``). A reader of the
dead-letter topic skips records with that header; ``MarkerIndex`` keeps what the markers name
between bounded reads (the admin API's).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from chronos.config.settings import Settings
from chronos.errors import ChronosError, ConfigError
from chronos.kafka.config import tail_consumer_config
from chronos.protocol import (
    DEAD_LETTER_CODE_HEADER,
    DEAD_LETTER_DEADLINE_HEADER,
    DEAD_LETTER_HEADERS,
    DEAD_LETTER_ID_HEADER,
    DEAD_LETTER_REASON_HEADER,
    DEAD_LETTER_REDUCED_HEADER,
    DEAD_LETTER_SOURCE_HEADER,
    DEAD_LETTER_TENANT_HEADER,
    DEAD_LETTER_TOPIC_HEADER,
    Headers,
    b64,
)

UNKNOWN_CODE = "unknown"  # a dead letter without chronosDeadLetterCode (written before it)
REPLAYED_HEADER = "chronosDeadLetterReplayed"  # a replay marker: the offsets it replayed
MARKER_CODE = "replay_marker"


class ReplayError(ChronosError):
    """The replay could not go on (the broker refused a record, or could not be reached)."""


class ReplayTakenOver(ReplayError):
    """A replay started elsewhere (another node, ``chronos admin replay``) took the dead-letter
    topic over: this one stopped after its last whole batch."""


class NotADeadLetter(ReplayError):
    """A chosen position holds no dead letter (no record there, or a replay marker)."""


@dataclass(frozen=True)
class Scheduled:
    """What the dead letter of a scheduled message (expired, publish_failed) says of it, as
    written (the ``chronosDeadLetter*`` headers of ``scheduled_headers``): enough for a replay
    to schedule it again."""

    message_id: bytes  # the id to schedule it under
    deadline: bytes | None  # when it was due
    topic: bytes | None  # its chronosTopic (None: the output topic)
    tenant: bytes | None  # its tenant (None: the default one)


@dataclass(frozen=True)
class DeadLetter:
    """One record of the dead-letter topic."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Headers  # the original headers (the dead-letter ones removed)
    reason: str
    code: str
    source: str
    reduced: str | None
    marks: tuple[int, ...] = ()  # a replay marker's offsets (then it is no dead letter)
    scheduled: Scheduled | None = None  # a scheduled message's: what its replay needs

    @property
    def is_marker(self) -> bool:
        return bool(self.marks)

    @property
    def position(self) -> str:
        return f"{self.partition}:{self.offset}"

    @property
    def when(self) -> str:
        stamp = datetime.fromtimestamp(self.timestamp_ms / 1000, UTC)
        return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    @property
    def size(self) -> int:
        """The bytes of the record's key, value and headers (what reading it cost)."""
        headers = sum(len(name) + len(value or b"") for name, value in self.headers)
        return len(self.key or b"") + len(self.value or b"") + headers

    def json(self, replayed: bool | None = None) -> dict[str, Any]:
        topic, partition, offset = source_position(self.source)
        return {
            "partition": self.partition,
            "offset": self.offset,
            "when": self.when,
            "code": self.code,
            "reason": self.reason,
            "source": self.source,
            "source_topic": topic,
            "source_partition": partition,
            "source_offset": offset,
            "reduced": self.reduced,
            "replayed": replayed,
            "key": b64(self.key),
            "value_size": None if self.value is None else len(self.value),
            "headers": [{"name": name, "value": b64(value)} for name, value in self.headers],
        }


def original_headers(headers: Headers) -> Headers:
    """A dead letter's headers without the ones Chronos added (order and repeats kept)."""
    return [(name, value) for name, value in headers if name not in DEAD_LETTER_HEADERS]


def read(
    partition: int, offset: int, timestamp_ms: int, key: Any, value: Any, raw: Any
) -> DeadLetter:
    headers = cast(Headers, list(raw or ()))
    added = {name: (value or b"").decode("utf-8", "replace") for name, value in headers}
    marks = tuple(int(o) for o in added.get(REPLAYED_HEADER, "").split(",") if o.strip().isdigit())
    raw_added = dict(headers)  # the last of each name, as written
    message_id = raw_added.get(DEAD_LETTER_ID_HEADER)
    scheduled = None
    if message_id:
        scheduled = Scheduled(
            message_id,
            raw_added.get(DEAD_LETTER_DEADLINE_HEADER),
            raw_added.get(DEAD_LETTER_TOPIC_HEADER),
            raw_added.get(DEAD_LETTER_TENANT_HEADER),
        )
    return DeadLetter(
        partition,
        offset,
        timestamp_ms,
        key,
        value,
        original_headers(headers),
        added.get(DEAD_LETTER_REASON_HEADER, ""),
        added.get(DEAD_LETTER_CODE_HEADER) or UNKNOWN_CODE,
        added.get(DEAD_LETTER_SOURCE_HEADER, ""),
        added.get(DEAD_LETTER_REDUCED_HEADER),
        marks,
        scheduled,
    )


def source_position(source: str) -> tuple[str | None, int | None, int | None]:
    """``topic/partition/offset`` of a dead letter's source header as its parts (None each when
    the source is ``chronos/ID``, a scheduled message, or unknown)."""
    topic, _, rest = source.rpartition("/")
    partition, _, offset = topic.rpartition("/")
    if not partition or not rest.isdigit():
        return None, None, None
    topic, partition = partition, offset
    if not partition.isdigit():
        return None, None, None
    return topic, int(partition), int(rest)


def parse_position(raw: str) -> tuple[int, int]:
    """``PARTITION:OFFSET``."""
    partition, sep, offset = raw.partition(":")
    if not sep or not partition.isdigit() or not offset.isdigit():
        raise ValueError(f"{raw!r} is not PARTITION:OFFSET (e.g. 0:42)")
    return int(partition), int(offset)


class DeadLetterTopic:
    """The dead-letter topic of ``settings``, read with assigned partitions (no group of its
    own, committed transactions only: a replay's batch and markers are one transaction)."""

    def __init__(
        self,
        settings: Settings,
        timeout: float = 10.0,
        consumer_overrides: dict[str, Any] | None = None,
    ):
        if not settings.dead_letter_topic:
            raise ConfigError("CHRONOS_DEAD_LETTER_TOPIC is empty: there is no dead-letter topic")
        self.settings = settings
        self.topic = settings.dead_letter_topic
        self.timeout = timeout
        from confluent_kafka import Consumer

        group = f"chronos-dead-letters-{uuid.uuid4()}"
        config = {**tail_consumer_config(settings, group), **(consumer_overrides or {})}
        # A replay's aborted batch (it was taken over) never counts: neither its markers nor
        # anything else of it is read.
        config["isolation.level"] = "read_committed"
        self.consumer = Consumer(config)
        try:
            metadata = self.consumer.list_topics(self.topic, timeout=timeout)
        except BaseException:
            self.consumer.close()
            raise
        found = metadata.topics.get(self.topic)
        if found is None or found.error is not None:
            self.consumer.close()
            raise ConfigError(f"CHRONOS_DEAD_LETTER_TOPIC {self.topic!r} does not exist")
        self.partitions = sorted(found.partitions)

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> DeadLetterTopic:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def ends(self) -> dict[int, tuple[int, int]]:
        from confluent_kafka import TopicPartition

        return {
            p: self.consumer.get_watermark_offsets(
                TopicPartition(self.topic, p), timeout=self.timeout
            )
            for p in self.partitions
        }

    def scan(self, starts: dict[int, int] | None = None) -> Iterator[DeadLetter]:
        """Every record from ``starts`` (default: the oldest) to the end as it is now."""
        from confluent_kafka import TopicPartition

        bounds = self.ends()
        todo = {}
        for p, (low, high) in bounds.items():
            start = max(low, (starts or {}).get(p, low))
            if start < high:
                todo[p] = (start, high)
        if not todo:
            return
        self.consumer.assign([TopicPartition(self.topic, p, s) for p, (s, _h) in todo.items()])
        idle_until = time.monotonic() + self.timeout
        fetched: set[int] = set()
        try:
            while todo:
                record = self.consumer.poll(0.5)
                if record is None or record.error() is not None:
                    # Past the end with nothing to read (the last offsets may hold no record:
                    # a compacted or transactional topic): done with those partitions.
                    positions = self.consumer.position(
                        [TopicPartition(self.topic, p) for p in todo]
                    )
                    for tp in positions:
                        if tp.offset >= todo[tp.partition][1]:
                            del todo[tp.partition]
                    if todo and time.monotonic() > idle_until:
                        raise ReplayError(f"no record arrived from {self.topic} in time")
                    continue
                idle_until = time.monotonic() + self.timeout
                p, offset = cast(int, record.partition()), cast(int, record.offset())
                if p in todo and p not in fetched:
                    # The end as the first fetch saw it, if further: a broker may answer the
                    # offsets query with the start of its last batch (the embedded one does).
                    fetched.add(p)
                    _low, seen = self.consumer.get_watermark_offsets(
                        TopicPartition(self.topic, p), cached=True
                    )
                    todo[p] = (todo[p][0], max(todo[p][1], seen))
                if p not in todo or offset >= todo[p][1]:
                    continue
                if offset + 1 >= todo[p][1]:
                    del todo[p]
                    self.consumer.incremental_unassign([TopicPartition(self.topic, p)])
                yield read(
                    p, offset, record.timestamp()[1], record.key(), record.value(), record.headers()
                )
        finally:
            self.consumer.unassign()

    def one(self, partition: int, offset: int) -> DeadLetter:
        """The record at ``partition:offset``."""
        from confluent_kafka import TopicPartition

        missing = NotADeadLetter(f"{self.topic} has no record {partition}:{offset}")
        if partition not in self.partitions:
            raise missing
        low, high = self.consumer.get_watermark_offsets(
            TopicPartition(self.topic, partition), timeout=self.timeout
        )
        if not low <= offset < high:
            raise missing
        self.consumer.assign([TopicPartition(self.topic, partition, offset)])
        limit = time.monotonic() + self.timeout
        try:
            while time.monotonic() < limit:
                record = self.consumer.poll(0.5)
                if record is None or record.error() is not None:
                    continue
                if record.offset() != offset:
                    raise missing
                return read(
                    partition,
                    offset,
                    record.timestamp()[1],
                    record.key(),
                    record.value(),
                    record.headers(),
                )
        finally:
            self.consumer.unassign()
        raise missing

    def replayed(self) -> set[tuple[int, int]]:
        """The positions the replay markers name."""
        done: set[tuple[int, int]] = set()
        for letter in self.scan():
            done |= {(letter.partition, offset) for offset in letter.marks}
        return done


class MarkerIndex:
    """What the replay markers name, kept between bounded reads: each ``catch_up`` reads on
    from where the last one stopped (a long-lived reader, e.g. the admin API's, never reads a
    record twice for it)."""

    def __init__(self) -> None:
        self.done: set[tuple[int, int]] = set()
        self.upto: dict[int, int] = {}  # per partition: the next offset to read

    def catch_up(self, dlq: DeadLetterTopic, until: float, max_bytes: int) -> bool:
        """Read the markers written since the last call, until the ``time.monotonic()``
        deadline ``until`` or ``max_bytes`` read; True when it read to the end."""
        spent = 0
        for letter in dlq.scan(dict(self.upto)):
            self.upto[letter.partition] = letter.offset + 1
            self.done |= {(letter.partition, offset) for offset in letter.marks}
            spent += letter.size
            if spent >= max_bytes or time.monotonic() >= until:
                return False
        return True

    def add(self, positions: list[tuple[int, int]]) -> None:
        self.done.update(positions)
