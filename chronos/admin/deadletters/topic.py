"""The dead-letter topic: read it (each record's reason, code, source, original headers, when)
and replay records back to the input topic, once each.

A dead letter is its original record (key, value, headers) plus the headers Chronos added
(``chronosDeadLetterReason``, ``chronosDeadLetterSource``, ``chronosDeadLetterCode`` and, when
reduced, ``chronosDeadLetterReduced``); a replay publishes the original key, value and headers,
those removed, to the input topic, where intake reads it like any other record.

**Once each.** What has been replayed is written to the dead-letter topic itself: after the
broker confirmed a batch of replayed records on the input topic, one *replay marker* per
partition goes to that partition of the dead-letter topic, a record without key or value whose
header ``chronosDeadLetterReplayed`` lists the offsets replayed (``12,13,40``). Before it
replays anything, a replay reads the markers; a record they name is not replayed again (by
reason or chosen by ``partition:offset``), and the listing shows it as replayed. The markers
live as long as the records they name (the topic's retention), need no other store, and survive
any number of runs; a reader of the dead-letter topic skips records with that header. A replay
interrupted between a batch's confirmation and its marker replays that batch again on its next
run (at least once): harmless for a schedule whose id is still waiting (it is ignored), and the
only window where a record can be replayed twice. Two replays at the same time are not guarded
against: run one at a time.

The command line (chronos.admin.deadletters.cli) and the admin API (chronos.admin.
deadletters.api) both read and replay through this module. The API works in bounded requests:
``MarkerIndex`` keeps what the markers name between requests (read on from where it stopped),
and a replay by reason stops after a batch once its time or bytes are spent, answering where to
resume.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from chronos.config.settings import Settings
from chronos.errors import ChronosError, ConfigError
from chronos.kafka.config import producer_config, tail_consumer_config
from chronos.protocol import (
    DEAD_LETTER_CODE_HEADER,
    DEAD_LETTER_HEADERS,
    DEAD_LETTER_REASON_HEADER,
    DEAD_LETTER_REDUCED_HEADER,
    DEAD_LETTER_SOURCE_HEADER,
    Headers,
    b64,
)

BATCH = 500  # records replayed between two markers
UNKNOWN_CODE = "unknown"  # a dead letter without chronosDeadLetterCode (written before it)
REPLAYED_HEADER = "chronosDeadLetterReplayed"  # a replay marker: the offsets it replayed
MARKER_CODE = "replay_marker"


class ReplayError(ChronosError):
    """The replay could not go on (the broker refused a record, or could not be reached)."""


class NotADeadLetter(ReplayError):
    """A chosen position holds no dead letter (no record there, or a replay marker)."""


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
    own); replay state through the per-code groups."""

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


# ---------------------------------------------------------------------------------- replaying


@dataclass
class Progress:
    scanned: int = 0
    replayed: int = 0
    skipped: int = 0  # already replayed
    resume: dict[int, int] | None = None  # stopped at its budget: where to read on from


@dataclass(frozen=True)
class Budget:
    """Where a replay by reason stops (after a whole batch, marked): a ``time.monotonic()``
    deadline and the bytes read (key, value, headers); None: no bound."""

    until: float | None = None
    max_bytes: int | None = None

    def spent(self, read: int) -> bool:
        over_time = self.until is not None and time.monotonic() >= self.until
        return over_time or (self.max_bytes is not None and read >= self.max_bytes)


class Replayer:
    """Publishes dead letters' originals to the input topic, and marks them replayed after
    the broker confirmed them."""

    def __init__(
        self,
        dlq: DeadLetterTopic,
        report: Callable[[Progress], None],
        index: MarkerIndex | None = None,
    ):
        """``index``: the markers already read (up to the topic's end); None: read them all
        at the start of each replay."""
        from confluent_kafka import Producer

        self.dlq = dlq
        self.report = report
        self.index = index
        self.producer = Producer(producer_config(dlq.settings, "replay"))
        self.errors: list[Any] = []
        self.progress = Progress()

    def _send(self, letter: DeadLetter) -> None:
        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                self.errors.append(err)

        self.producer.produce(
            self.dlq.settings.input_topic,
            key=letter.key,
            value=letter.value,
            headers=cast(list[tuple[str, str | bytes | None]], letter.headers),
            on_delivery=delivered,
        )
        self.producer.poll(0)

    def _confirm(self) -> None:
        remaining = self.producer.flush(max(30.0, self.dlq.settings.delivery_timeout_ms / 1000))
        if self.errors or remaining:
            raise ReplayError(
                f"{len(self.errors) + remaining} replayed records were not confirmed by the "
                f"broker ({self.errors[:1]}); nothing of this batch is marked replayed, run "
                "the replay again"
            )

    def _mark(self, sent: list[DeadLetter]) -> None:
        """Confirm the batch, then write its markers (one per partition)."""
        if not sent:
            return
        self._confirm()
        by_partition: dict[int, list[int]] = {}
        for letter in sent:
            by_partition.setdefault(letter.partition, []).append(letter.offset)
        for partition, offsets in by_partition.items():
            self.producer.produce(
                self.dlq.topic,
                key=None,
                value=None,
                partition=partition,
                headers=[
                    (REPLAYED_HEADER, ",".join(map(str, offsets)).encode()),
                    (DEAD_LETTER_CODE_HEADER, MARKER_CODE.encode()),
                ],
                on_delivery=lambda err, _msg: self.errors.append(err) if err else None,
            )
        self._confirm()
        if self.index is not None:
            self.index.add([(letter.partition, letter.offset) for letter in sent])
        sent.clear()

    def _done(self) -> set[tuple[int, int]]:
        return self.dlq.replayed() if self.index is None else self.index.done

    def by_code(
        self,
        code: str,
        dry_run: bool = False,
        starts: dict[int, int] | None = None,
        budget: Budget | None = None,
    ) -> Progress:
        """Replay every record of ``code`` from ``starts`` (default: the oldest); with a
        ``budget``, stop after the batch that spent it (``progress.resume``: where to go on)."""
        done = self._done()
        sent: list[DeadLetter] = []
        position = dict(starts or {})
        read = 0
        for letter in self.dlq.scan(starts):
            if budget is not None and read and budget.spent(read):  # one record at least
                self.progress.resume = dict(position)  # this record and on: the next time
                break  # (what was sent is marked below)
            position[letter.partition] = letter.offset + 1
            read += letter.size
            if letter.is_marker:
                continue
            self.progress.scanned += 1
            if letter.code != code:
                continue
            if (letter.partition, letter.offset) in done:
                self.progress.skipped += 1
                continue
            self.progress.replayed += 1
            if not dry_run:
                self._send(letter)
                sent.append(letter)
            if self.progress.replayed % BATCH == 0:
                self._mark(sent)
                self.report(self.progress)
        self._mark(sent)
        self.report(self.progress)
        return self.progress

    def chosen(self, positions: list[tuple[int, int]], dry_run: bool = False) -> Progress:
        done = self._done()
        for partition, offset in dict.fromkeys(positions):
            self.progress.scanned += 1
            if (partition, offset) in done:
                self.progress.skipped += 1
                self.report(self.progress)
                continue
            letter = self.dlq.one(partition, offset)
            if letter.is_marker:
                raise NotADeadLetter(f"{partition}:{offset} is a replay marker, not a dead letter")
            self.progress.replayed += 1
            if not dry_run:
                self._send(letter)
                self._mark([letter])
            self.report(self.progress)
        return self.progress
