"""Replaying dead letters to the input topic, once each, across the cluster (the command line's
``chronos admin replay`` and every node's admin API replay through this module).

**What is published.** A dead letter of a record intake could not accept (malformed, a topic not
allowed...) goes back as it came: its original key, value and headers, the dead-letter ones
removed. A scheduled message's dead letter (``expired``, ``publish_failed``: its own Chronos
headers were not stored) carries ``chronosDeadLetterMessageId`` and the rest of
``chronos.protocol.scheduled_headers``: it goes back as a new input record under that id, due
now, to its original ``chronosTopic`` and tenant, with its key, value and other headers
byte-exact, so it fires once, at once, where it was due to fire. A record that cannot make a
valid input record is *refused*, with its reason, and not marked: a reduced dead letter (its
value was left out), and a scheduled message's dead letter written before Chronos kept what a
replay needs (no id, target topic or tenant).

**Once each, cluster-wide.** A replayed batch and its *replay markers* (one per dead-letter
partition, naming the offsets replayed) are one Kafka transaction, committed together or not at
all. The transactional id is the dead-letter topic's own (``chronos-replay-<topic>``): a replay
*claims* the topic by initialising it, which fences any replay still running elsewhere (another
node, ``chronos admin replay``: its open batch is aborted, its next one refused, and it stops
with ``ReplayTakenOver``), and reads the markers to the end only after that claim. So a record is
published at most once and marked exactly when it was; intake reads the input topic
``read_committed`` and never sees an aborted batch. A replay that dies mid-batch leaves its batch
open until the next claim or ``TRANSACTION_TIMEOUT_MS`` (intake's read of the input partitions
it wrote to waits for that).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from chronos.admin.deadletters.topic import (
    MARKER_CODE,
    REPLAYED_HEADER,
    DeadLetter,
    DeadLetterTopic,
    MarkerIndex,
    NotADeadLetter,
    ReplayError,
    ReplayTakenOver,
)
from chronos.config.settings import Settings
from chronos.kafka.config import producer_config
from chronos.protocol import (
    CHRONOS_HEADERS,
    DEAD_LETTER_CODE_HEADER,
    DEADLINE_HEADER,
    MESSAGE_ID_HEADER,
    TENANT_HEADER,
    TOPIC_HEADER,
    Headers,
    format_deadline,
)

BATCH = 500  # records replayed in one transaction (with their markers)
TRANSACTION_TIMEOUT_MS = 30_000  # an abandoned batch is aborted by the broker after this
CLAIM_TIMEOUT_S = 10.0  # initialising the transactional id (the claim) waits this long at most
SCHEDULED_CODES = frozenset({"expired", "publish_failed"})  # a message Chronos had accepted
MAX_REFUSALS_KEPT = 100  # refused records listed with their reason (all are counted)


def transactional_id(settings: Settings) -> str:
    """One per dead-letter topic: every replayer of the topic shares it (and fences the others)."""
    return f"chronos-replay-{settings.dead_letter_topic}"


def replay_producer_config(settings: Settings) -> dict[str, Any]:
    conf = producer_config(settings, "replay")
    conf["transactional.id"] = transactional_id(settings)
    conf["transaction.timeout.ms"] = TRANSACTION_TIMEOUT_MS
    # librdkafka refuses a record timeout longer than the transaction's.
    conf["delivery.timeout.ms"] = min(conf["delivery.timeout.ms"], TRANSACTION_TIMEOUT_MS)
    conf["request.timeout.ms"] = min(conf["request.timeout.ms"], conf["delivery.timeout.ms"])
    return conf


def input_headers(letter: DeadLetter, now: datetime) -> Headers | str:
    """The headers of the input record a replay of ``letter`` publishes, or why it cannot."""
    if letter.reduced is not None:
        return (
            f"a reduced dead letter ({letter.reduced}): its value (and large headers) were "
            "left out, a replay would publish something else"
        )
    scheduled = letter.scheduled
    if scheduled is not None:
        rebuilt: Headers = [
            (MESSAGE_ID_HEADER, scheduled.message_id),
            (DEADLINE_HEADER, format_deadline(now).encode("ascii")),  # fire now
        ]
        if scheduled.topic:
            rebuilt.append((TOPIC_HEADER, scheduled.topic))
        if scheduled.tenant:
            rebuilt.append((TENANT_HEADER, scheduled.tenant))
        return [*rebuilt, *((n, v) for n, v in letter.headers if n not in CHRONOS_HEADERS)]
    if letter.code in SCHEDULED_CODES and all(n != MESSAGE_ID_HEADER for n, _ in letter.headers):
        return (
            f"a scheduled message's dead letter ({letter.code}) written before Chronos kept what "
            "a replay needs: its id, target topic and tenant are not in it (schedule it again "
            "from its key, value and headers)"
        )
    return letter.headers


@dataclass
class Progress:
    scanned: int = 0
    replayed: int = 0  # committed (with dry_run: would be replayed)
    skipped: int = 0  # already replayed
    refused: int = 0  # cannot make a valid input record (not replayed, not marked)
    refusals: list[tuple[str, str]] = field(default_factory=list)  # (position, why), the first
    resume: dict[int, int] | None = None  # stopped at its budget: where to read on from

    def refuse(self, letter: DeadLetter, why: str) -> None:
        self.refused += 1
        if len(self.refusals) < MAX_REFUSALS_KEPT:
            self.refusals.append((letter.position, why))


@dataclass(frozen=True)
class Budget:
    """Where a replay by reason stops (after a whole batch, marked): a ``time.monotonic()``
    deadline and the bytes read (key, value, headers); None: no bound."""

    until: float | None = None
    max_bytes: int | None = None

    def spent(self, read: int) -> bool:
        over_time = self.until is not None and time.monotonic() >= self.until
        return over_time or (self.max_bytes is not None and read >= self.max_bytes)


def _fenced(err: Any) -> bool:
    from confluent_kafka import KafkaError

    fenced = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    return isinstance(err, KafkaError) and err.code() in fenced


class Replayer:
    """Publishes dead letters to the input topic in transactions that also write their replay
    markers, after claiming the topic (see the module's docstring)."""

    def __init__(
        self,
        dlq: DeadLetterTopic,
        report: Callable[[Progress], None],
        index: MarkerIndex | None = None,
        deadline: float | None = None,
    ):
        """``index``: the markers, read up to the topic's end after ``claim``; None: read them
        all after the claim, at the start of each replay. ``deadline``: the ``time.monotonic()``
        instant every wait of this replay (the claim, a batch's commit) ends by; None: none."""
        self.dlq = dlq
        self.report = report
        self.index = index
        self.deadline = deadline
        self.producer: Any = None
        self.open = False  # a transaction begun and not yet ended
        self.errors: list[Any] = []
        self.progress = Progress()

    def _wait(self, most: float) -> float:
        if self.deadline is None:
            return most
        return max(0.5, min(most, self.deadline - time.monotonic()))

    def _failed(self, exc: BaseException, what: str) -> ReplayError:
        err = exc.args[0] if exc.args else None
        first = self.errors[0] if self.errors else None
        if _fenced(err) or _fenced(first):
            return ReplayTakenOver(
                "another replay of this dead-letter topic started (on another node, or "
                "`chronos admin replay`) and took it over: this one stopped after "
                f"{self.progress.replayed} records; nothing is replayed twice, run it again "
                "once the other is done"
            )
        return ReplayError(
            f"{what}: {first or err or exc}; nothing of this batch is replayed or marked (or, if "
            "the broker confirmed it late, all of it is): run the replay again"
        )

    def claim(self) -> None:
        """Take the topic for replaying (fencing any replay running elsewhere); from then on,
        the markers read to the end name everything replayed before."""
        if self.producer is not None:
            return
        from confluent_kafka import KafkaException, Producer

        producer = Producer(replay_producer_config(self.dlq.settings))
        try:
            producer.init_transactions(self._wait(CLAIM_TIMEOUT_S))
        except KafkaException as exc:
            raise self._failed(exc, "could not claim the dead-letter topic for replaying") from None
        self.producer = producer

    def close(self) -> None:
        """Abort a batch left open (an error midway): none of it is replayed."""
        if self.open:
            self.open = False
            # Failing, the broker aborts it at the transaction timeout, or the next claim does.
            with contextlib.suppress(Exception):
                self.producer.abort_transaction(self._wait(5.0))

    def _send(self, letter: DeadLetter, headers: Headers) -> None:
        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                self.errors.append(err)

        from confluent_kafka import KafkaException

        try:
            if not self.open:
                self.producer.begin_transaction()
                self.open = True
            self.producer.produce(
                self.dlq.settings.input_topic,
                key=letter.key,
                value=letter.value,
                headers=cast(list[tuple[str, str | bytes | None]], headers),
                on_delivery=delivered,
            )
            self.producer.poll(0)
        except KafkaException as exc:  # e.g. fenced: a replay elsewhere took the topic over
            self.close()
            raise self._failed(exc, "the broker refused a replayed record") from None

    def _mark(self, sent: list[DeadLetter]) -> None:
        """Write the batch's markers (one per partition) and commit it with them."""
        if not sent:
            return
        from confluent_kafka import KafkaException

        by_partition: dict[int, list[int]] = {}
        for letter in sent:
            by_partition.setdefault(letter.partition, []).append(letter.offset)
        try:
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
                )
            self.producer.commit_transaction(self._wait(TRANSACTION_TIMEOUT_MS / 1000))
        except KafkaException as exc:
            self.close()
            raise self._failed(
                exc, f"{len(sent)} replayed records were not confirmed by the broker"
            ) from None
        self.open = False
        self.progress.replayed += len(sent)
        if self.index is not None:
            self.index.add([(letter.partition, letter.offset) for letter in sent])
        sent.clear()

    def _done(self) -> set[tuple[int, int]]:
        return self.dlq.replayed() if self.index is None else self.index.done

    def _take(self, letter: DeadLetter, done: set[tuple[int, int]], dry_run: bool) -> bool:
        """Count ``letter``; True when it was sent (in the open batch), False when it is
        already replayed, refused, or only counted (``dry_run``)."""
        self.progress.scanned += 1
        if (letter.partition, letter.offset) in done:
            self.progress.skipped += 1
            return False
        headers = input_headers(letter, datetime.now(UTC))
        if isinstance(headers, str):
            self.progress.refuse(letter, headers)
            return False
        if dry_run:
            self.progress.replayed += 1
            return False
        self._send(letter, headers)
        return True

    def by_code(
        self,
        code: str,
        dry_run: bool = False,
        starts: dict[int, int] | None = None,
        budget: Budget | None = None,
    ) -> Progress:
        """Replay every record of ``code`` from ``starts`` (default: the oldest); with a
        ``budget``, stop after the batch that spent it (``progress.resume``: where to go on)."""
        if not dry_run:
            self.claim()
        try:
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
                if letter.code != code:
                    self.progress.scanned += 1
                    continue
                if self._take(letter, done, dry_run):
                    sent.append(letter)
                    if len(sent) >= BATCH:
                        self._mark(sent)
                        self.report(self.progress)
            self._mark(sent)
        finally:
            self.close()
        self.report(self.progress)
        return self.progress

    def chosen(self, positions: list[tuple[int, int]], dry_run: bool = False) -> Progress:
        if not dry_run:
            self.claim()
        try:
            done = self._done()
            for partition, offset in dict.fromkeys(positions):
                if (partition, offset) in done:
                    self.progress.scanned += 1
                    self.progress.skipped += 1
                    self.report(self.progress)
                    continue
                letter = self.dlq.one(partition, offset)
                if letter.is_marker:
                    raise NotADeadLetter(
                        f"{partition}:{offset} is a replay marker, not a dead letter"
                    )
                if self._take(letter, done, dry_run):
                    self._mark([letter])
                self.report(self.progress)
        finally:
            self.close()
        return self.progress
