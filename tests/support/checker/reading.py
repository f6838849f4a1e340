"""Reading the output and dead-letter topics from their first record (``assign()``, never a
consumer group), until every expected message was seen and then a quiet period."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import cast

from tests.support.checker.analysis import Observation, Report, analyse
from tests.support.checker.sent import Expectation, Headers


class TopicReader:
    """Reads topics from their first record with ``assign()``; keeps what it read.

    ``read_until`` polls until ``done(observations)`` has held for ``quiet`` seconds or until
    ``timeout``. It may be called again to continue where it stopped.
    """

    def __init__(self, bootstrap: str, output_topic: str, dead_letter_topic: str | None):
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.output_topic = output_topic
        self.dead_letter_topic = dead_letter_topic
        self.observations: list[Observation] = []
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"chronos-checker-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "fetch.wait.max.ms": 100,
                "receive.message.max.bytes": 200_000_000,
                "fetch.max.bytes": 100_000_000,
                "max.partition.fetch.bytes": 10_000_000,
            }
        )
        topics = [t for t in (output_topic, dead_letter_topic) if t]
        metadata = self._consumer.list_topics(timeout=10)
        assignment = []
        for topic in topics:
            partitions = metadata.topics[topic].partitions if topic in metadata.topics else {0: 0}
            assignment += [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions]
        self._consumer.assign(assignment)

    def poll(self, timeout: float = 0.2) -> int:
        got = 0
        for message in self._consumer.consume(1000, timeout=timeout):
            if message.error() is not None:
                continue
            _kind, stamp = message.timestamp()
            self.observations.append(
                Observation(
                    topic=str(message.topic()),
                    partition=int(message.partition() or 0),
                    offset=int(message.offset() or 0),
                    timestamp_ms=int(stamp),
                    key=message.key(),
                    value=message.value(),
                    headers=cast(Headers, list(message.headers() or [])),
                    dead_letter=message.topic() == self.dead_letter_topic,
                )
            )
            got += 1
        return got

    def read_until(
        self,
        done: Callable[[list[Observation]], bool],
        *,
        timeout: float,
        quiet: float = 1.0,
    ) -> bool:
        limit = time.monotonic() + timeout
        satisfied_at: float | None = None
        while True:
            self.poll()
            now = time.monotonic()
            if done(self.observations):
                satisfied_at = satisfied_at or now
                if now - satisfied_at >= quiet:
                    return True
            else:
                satisfied_at = None
            if now >= limit:
                return done(self.observations)

    def tracks(self) -> set[str]:
        return {t for o in self.observations if (t := o.track) is not None}

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> TopicReader:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def check(
    bootstrap: str,
    output_topic: str,
    dead_letter_topic: str | None,
    sent: Mapping[str, Expectation],
    *,
    advance_ms: int,
    timeout: float = 60.0,
    quiet: float = 1.5,
    timestamp_skew_ms: int = 0,
    reader: TopicReader | None = None,
) -> Report:
    """Read both topics from the start until every sent message was seen (then ``quiet``
    seconds more, for duplicates), or until ``timeout``; then ``analyse``."""
    wanted = set(sent)
    own = reader is None
    reader = reader or TopicReader(bootstrap, output_topic, dead_letter_topic)
    try:
        reader.read_until(
            lambda obs: wanted <= {o.track for o in obs}, timeout=timeout, quiet=quiet
        )
        return analyse(
            sent, reader.observations, advance_ms=advance_ms, timestamp_skew_ms=timestamp_skew_ms
        )
    finally:
        if own:
            reader.close()


class LiveReader:
    """A ``TopicReader`` polled by a background thread (for tests that watch while they act)."""

    def __init__(self, bootstrap: str, output_topic: str, dead_letter_topic: str | None):
        self.reader = TopicReader(bootstrap, output_topic, dead_letter_topic)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checker-live", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                self.reader.poll(0.1)
            time.sleep(0.01)

    def snapshot(self) -> list[Observation]:
        with self._lock:
            return list(self.reader.observations)

    def wait_for(self, tracks: Iterable[str], timeout: float) -> bool:
        wanted = set(tracks)
        limit = time.monotonic() + timeout
        while time.monotonic() < limit:
            if wanted <= {o.track for o in self.snapshot()}:
                return True
            time.sleep(0.05)
        return wanted <= {o.track for o in self.snapshot()}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.reader.close()
