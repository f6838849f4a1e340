"""What intake publishes itself (lapsed messages, dead letters) and the consumed batches waiting
for those publishes to be confirmed (chronos.intake.loop), with the history records the
confirmed ones leave (chronos.intake.history)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message

from chronos.kafka import Publisher
from chronos.protocol import DEAD_LETTER_REDUCED_HEADER, Headers, ScheduledMessage
from chronos.store import EndedOnArrival


def position(source: tuple[Message, Any]) -> str:
    """An input record's topic/partition/offset (``source``: the record and its headers)."""
    record = source[0]
    return f"{record.topic()}/{record.partition()}/{record.offset()}"


@dataclass(slots=True)
class Pending:
    """A record to publish (directly, or to the dead-letter topic) and its delivery state."""

    topic: str
    key: bytes | None
    value: bytes | None
    headers: Headers
    kind: str  # "direct" | "dead_letter:<reason>"
    error: KafkaError | None = None
    done: bool = False
    refusals: int = 0  # permanent refusals so far
    source: str = ""  # topic/partition/offset of the input record
    message: ScheduledMessage | None = None  # a direct publish's message (for its dead letter)
    # Its message's history record once it is delivered (None: none), completed then with the
    # topic, partition and offset; ``attempt`` counts the publishes before this record's (a
    # direct publish refused for good, then dead-lettered), its own refusals are added.
    ended: EndedOnArrival | None = None
    position: tuple[int, int] | None = None  # the delivered record's (partition, offset)


def delivered_record(item: Pending) -> EndedOnArrival | None:
    """The history record of a delivered ``item`` (None: it carries none)."""
    ended = item.ended
    if ended is None or item.position is None:
        return None
    partition, offset = item.position
    ending = ended.ending._replace(topic=item.topic, partition=partition, offset=offset)
    return ended._replace(ending=ending, attempt=(ended.attempt or 0) + item.refusals + 1)


def carried(item: Pending) -> EndedOnArrival | None:
    """``item``'s history record, for the publish that replaces it (after its attempts)."""
    ended = item.ended
    if ended is None:
        return None
    return ended._replace(attempt=(ended.attempt or 0) + item.refusals)


@dataclass(slots=True)
class Unsettled:
    """A consumed batch whose publishes are not all confirmed: its offsets wait."""

    pending: list[Pending]
    offsets: dict[tuple[str, int], int]
    produced_at: float  # monotonic
    give_up_at: float  # monotonic: dead letters refused past this are parked
    dropped: list[EndedOnArrival] = field(default_factory=list)  # history of its drops


@dataclass(slots=True)
class Prepared:
    """A consumed batch parsed and checked, before its enqueue statement: the messages to
    store (folded: one per id, with their sources), what it already has to publish (dead
    letters of malformed records), its offsets and counts; ``statement``: the enqueue
    statement under way for it, if any (its outcomes, one per message, or None if stopped)."""

    folded: Any  # Folded[tuple[Message, Headers | None]]
    pending: list[Pending]
    offsets: dict[tuple[str, int], int]
    consumed: int
    duplicates: int
    statement: Future[Any] | None = field(default=None)
    # Each partition's first record in the batch (where to read it again if its shard is away).
    firsts: dict[tuple[str, int], int] = field(default_factory=dict)
    batch: int = 0  # its number, as consumed (chronos.intake.partitions.shards)


REDUCED_HEADER_LIMIT = 1024  # bytes of one header value kept in a reduced dead letter
REDUCED_HEADERS_TOTAL = 16 * 1024


def reduced(item: Pending, topic: str) -> Pending:
    """A dead letter that always fits: small headers kept (the reason and the source among
    them), the value, a large key and large headers replaced by their sizes."""
    kept: Headers = []
    total = 0
    dropped = 0
    for name, value in item.headers:
        size = len(name) + len(value or b"")
        small = value is None or len(value) <= REDUCED_HEADER_LIMIT
        if name.startswith("chronosDeadLetter") or (
            small and total + size <= REDUCED_HEADERS_TOTAL
        ):
            kept.append((name, value))
            total += size
        else:
            dropped += 1
    key = item.key if item.key is None or len(item.key) <= REDUCED_HEADER_LIMIT else None
    sizes = (
        f"value {len(item.value) if item.value is not None else 'null'} bytes, "
        f"key {len(item.key) if item.key is not None else 'null'} bytes, "
        f"{dropped} headers left out"
    )
    kept.append((DEAD_LETTER_REDUCED_HEADER, sizes.encode()))
    return Pending(
        topic,
        key,
        None,
        kept,
        "dead_letter_reduced:publish_refused",
        source=item.source,
        ended=carried(item),
    )


def reporter(item: Pending, publisher: Publisher) -> Callable[[KafkaError | None], None]:
    """``item``'s delivery callback: its error, and the delivered record's position (what
    ``publisher`` says while the callback is served)."""

    def report(err: KafkaError | None) -> None:
        item.error = err
        item.position = publisher.position if err is None else None
        item.done = True

    return report
