"""The delivery checker of the fault suite: what was sent against what came out.

Every message a test sends carries an ordinary header, ``TRACKING_HEADER``, with a unique
tracking id. Chronos relays every non-Chronos header byte-exact (to the output topic, and to the
dead-letter topic with the reason added), so each output or dead-letter record names the message
it came from; output records do not carry ``chronosMessageId``.

``check`` reads the output and dead-letter topics from the beginning (``assign()``, never a
consumer group; the embedded broker's ListOffsets high watermark is wrong, so it polls until
every expected message was seen and then a quiet period, or until a timeout) and ``analyse``
compares them with the sent set:

* **lost**: sent, expected somewhere, seen on neither topic;
* **misrouted**: seen, but on the other topic than expected (a message due to fire that was
  dead-lettered, or one due for the dead-letter topic that was fired);
* **duplicated**: seen more than once (both topics together), with the count;
* **early**: fired before ``deadline - timing advance`` by more than 1 ms (the record timestamp
  is the fire time, truncated to whole milliseconds by the producer);
* **late**: statistics of ``fire time - deadline`` over the first copy of each fired message;
* **dead-lettered**: each dead-lettered message with its ``chronosDeadLetterReason``.

``python -m tests.support.checker [DIR]`` prints the README "Reliability" table from the result
files the fault suite writes (``.chronos/reliability/<scenario>.json`` by default).
"""

from __future__ import annotations

import json
import math
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import EllipsisType
from typing import Any, cast

from chronos.protocol import (
    DEAD_LETTER_REASON_HEADER,
    DEADLINE_HEADER,
    MESSAGE_ID_HEADER,
    format_deadline,
    parse_deadline,
)

TRACKING_HEADER = "x-chronos-track"
TIMESTAMP_TOLERANCE_MS = 1  # CreateTime is whole milliseconds: a fire at x.9 ms reads as x

Headers = list[tuple[str, bytes | None]]

RESULTS_DIR = Path(__file__).resolve().parents[2] / ".chronos" / "reliability"


# ----------------------------------------------------------------------------- what was sent


@dataclass(frozen=True)
class Expectation:
    """What should become of one sent message."""

    deadline_ms: int | None  # the deadline as sent (whole ms); None when it had none/invalid
    dead_letter: bool = False  # True: it must reach the dead-letter topic, not the output


@dataclass(frozen=True)
class Outgoing:
    """One record for the input topic, with its tracking id and expectation."""

    track: str
    key: bytes | None
    value: bytes | None
    headers: Headers  # as sent: Chronos headers and the tracking header included
    expectation: Expectation

    @property
    def relayed_headers(self) -> Headers:
        """The headers Chronos publishes on the output topic (Chronos headers removed)."""
        return [(n, v) for n, v in self.headers if n not in (MESSAGE_ID_HEADER, DEADLINE_HEADER)]


def new_track(prefix: str = "m") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def scheduled(
    deadline: datetime,
    *,
    track: str | None = None,
    message_id: str | None = None,
    key: bytes | None | EllipsisType = ...,
    value: bytes | None = b"value",
    extra_headers: Headers | None = None,
) -> Outgoing:
    """A well-formed Chronos message due at ``deadline`` (sent with millisecond precision).

    The key defaults to the tracking id, so that messages spread over the partitions."""
    track = track or new_track()
    if key is ...:
        key = track.encode()
    text = format_deadline(deadline)
    headers: Headers = [
        (MESSAGE_ID_HEADER, (message_id or track).encode()),
        (DEADLINE_HEADER, text.encode()),
        (TRACKING_HEADER, track.encode()),
        *(extra_headers or []),
    ]
    deadline_ms = round(parse_deadline(text).timestamp() * 1000)
    return Outgoing(track, key, value, headers, Expectation(deadline_ms))


def due_in(seconds: float, **kwargs: Any) -> Outgoing:
    return scheduled(datetime.now(UTC) + timedelta(seconds=seconds), **kwargs)


def raw(
    headers: Headers,
    *,
    dead_letter: bool,
    deadline_ms: int | None = None,
    track: str | None = None,
    key: bytes | None = b"key",
    value: bytes | None = b"value",
) -> Outgoing:
    """A record with exactly ``headers`` (plus the tracking header, appended): for bad input."""
    track = track or new_track("raw")
    return Outgoing(
        track,
        key,
        value,
        [*headers, (TRACKING_HEADER, track.encode())],
        Expectation(deadline_ms, dead_letter),
    )


def expectations(messages: Iterable[Outgoing]) -> dict[str, Expectation]:
    return {m.track: m.expectation for m in messages}


# ----------------------------------------------------------------------------- what came out


@dataclass(frozen=True)
class Observation:
    """One record read from the output or the dead-letter topic."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    dead_letter: bool

    @property
    def track(self) -> str | None:
        value = header(self.headers, TRACKING_HEADER)
        if value is None:
            return None
        return value.decode("utf-8", errors="replace")

    @property
    def reason(self) -> str | None:
        value = header(self.headers, DEAD_LETTER_REASON_HEADER)
        return None if value is None else value.decode("utf-8", errors="replace")


def header(headers: Sequence[tuple[str, bytes | None]], name: str) -> bytes | None:
    """The value of the first header called ``name`` (None if absent)."""
    for n, v in headers:
        if n == name:
            return v
    return None


@dataclass(frozen=True)
class LateStats:
    """``fire time - deadline`` (ms) over the first copy of each fired message."""

    count: int = 0
    p50: float = 0.0
    p99: float = 0.0
    max: float = 0.0
    mean: float = 0.0

    @classmethod
    def of(cls, values: Sequence[float]) -> LateStats:
        if not values:
            return cls()
        ordered = sorted(values)

        def pct(p: float) -> float:
            return ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))]

        return cls(len(ordered), pct(0.5), pct(0.99), ordered[-1], sum(ordered) / len(ordered))


@dataclass
class Report:
    sent: int
    received: int  # records read (both topics, duplicates included)
    lost: list[str] = field(default_factory=list)
    misrouted: list[str] = field(default_factory=list)
    duplicated: dict[str, int] = field(default_factory=dict)  # id -> copies seen (> 1)
    early: dict[str, int] = field(default_factory=dict)  # id -> ms before deadline - advance
    late: LateStats = field(default_factory=LateStats)
    dead_lettered: dict[str, str | None] = field(default_factory=dict)  # id -> reason
    unknown: int = 0  # records without a tracking id of this test
    fired_at: dict[str, int] = field(default_factory=dict)  # id -> first fire (ms, corrected)
    observations: list[Observation] = field(default_factory=list, repr=False)

    @property
    def duplicates(self) -> int:
        """Surplus copies: records beyond the first of each message."""
        return sum(count - 1 for count in self.duplicated.values())

    @property
    def ok(self) -> bool:
        """No loss, no misrouting, nothing early (duplicates are judged per scenario)."""
        return not self.lost and not self.misrouted and not self.early

    def summary(self) -> str:
        def few(items: Iterable[Any]) -> str:
            items = list(items)
            more = f" (+{len(items) - 5} more)" if len(items) > 5 else ""
            return ", ".join(map(str, items[:5])) + more

        return (
            f"sent {self.sent}, received {self.received}, lost {len(self.lost)}"
            f"{' [' + few(self.lost) + ']' if self.lost else ''}, misrouted "
            f"{len(self.misrouted)}{' [' + few(self.misrouted) + ']' if self.misrouted else ''}"
            f", duplicated {len(self.duplicated)} ids / {self.duplicates} copies, early "
            f"{len(self.early)}{' [' + few(self.early.items()) + ']' if self.early else ''}, "
            f"dead-lettered {len(self.dead_lettered)}, unknown {self.unknown}, late ms p50 "
            f"{self.late.p50:.0f} p99 {self.late.p99:.0f} max {self.late.max:.0f}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "received": self.received,
            "lost": len(self.lost),
            "misrouted": len(self.misrouted),
            "duplicated_ids": len(self.duplicated),
            "duplicates": self.duplicates,
            "early": len(self.early),
            "dead_lettered": len(self.dead_lettered),
            "unknown": self.unknown,
            "late_ms": asdict(self.late),
        }


def analyse(
    sent: Mapping[str, Expectation],
    observations: Iterable[Observation],
    *,
    advance_ms: int,
    timestamp_skew_ms: int = 0,
) -> Report:
    """Compare the records seen with the sent set (pure: no I/O).

    ``timestamp_skew_ms``: how far the producing nodes' wall clocks were ahead of true time
    (record timestamps are the producer's clock); subtracted from every timestamp.
    """
    observations = list(observations)
    copies: Counter[str] = Counter()
    seen_output: set[str] = set()
    seen_dead: set[str] = set()
    fired_at: dict[str, int] = {}
    early: dict[str, int] = {}
    dead: dict[str, str | None] = {}
    unknown = 0
    for obs in observations:
        track = obs.track
        if track is None or track not in sent:
            unknown += 1
            continue
        copies[track] += 1
        if obs.dead_letter:
            seen_dead.add(track)
            dead.setdefault(track, obs.reason)
            continue
        seen_output.add(track)
        fired = obs.timestamp_ms - timestamp_skew_ms
        fired_at[track] = min(fired, fired_at.get(track, fired))
        deadline = sent[track].deadline_ms
        if deadline is not None:
            ahead = (deadline - advance_ms) - fired
            if ahead > TIMESTAMP_TOLERANCE_MS:
                early[track] = max(ahead, early.get(track, 0))
    lost, misrouted = [], []
    for track, expectation in sent.items():
        if track not in seen_output and track not in seen_dead:
            lost.append(track)
        elif expectation.dead_letter and track in seen_output:
            misrouted.append(track)
        elif not expectation.dead_letter and track not in seen_output:
            misrouted.append(track)
    lateness = [
        fired_at[t] - d
        for t in fired_at
        if (d := sent[t].deadline_ms) is not None and not sent[t].dead_letter
    ]
    return Report(
        sent=len(sent),
        received=len(observations),
        lost=sorted(lost),
        misrouted=sorted(misrouted),
        duplicated={t: n for t, n in copies.items() if n > 1},
        early=early,
        late=LateStats.of(lateness),
        dead_lettered=dead,
        unknown=unknown,
        fired_at=fired_at,
        observations=observations,
    )


# ----------------------------------------------------------------------------- reading topics


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


# ----------------------------------------------------------------------------- sending


def send(
    bootstrap: str,
    topic: str,
    messages: Sequence[Outgoing],
    *,
    partition: int | None = None,
    config: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
) -> list[tuple[int, int]]:
    """Produce ``messages`` and wait for every delivery; returns (partition, offset) of each."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **(config or {})}
    )
    where: list[tuple[int, int]] = [(-1, -1)] * len(messages)
    errors: list[str] = []

    def report(index: int) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                where[index] = (msg.partition(), msg.offset())

        return on_delivery

    for index, m in enumerate(messages):
        kwargs: dict[str, Any] = {"partition": partition} if partition is not None else {}
        while True:
            try:
                producer.produce(
                    topic,
                    key=m.key,
                    value=m.value,
                    headers=cast(Any, m.headers),
                    on_delivery=report(index),
                    **kwargs,
                )
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(timeout)
    if left or errors:
        raise AssertionError(f"producing to {topic}: {left} undelivered, errors {errors[:3]}")
    return where


class Load:
    """Sends messages at ``rate`` per second from a background thread, each due ``delay``
    seconds (uniform in the range) after it is sent, until ``stop()``."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        rate: float = 100.0,
        delay: tuple[float, float] = (1.0, 3.0),
        seed: int = 0,
    ) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.rate = rate
        self.delay = delay
        self.sent: list[Outgoing] = []
        self.acked: dict[str, tuple[int, int, float]] = {}  # track -> partition, offset, when
        self.errors: list[str] = []
        self._random = __import__("random").Random(seed)
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="checker-load", daemon=True)

    def start(self) -> Load:
        self._thread.start()
        return self

    def _run(self) -> None:
        interval = 1 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            message = due_in(self._random.uniform(*self.delay))
            self._producer.produce(
                self.topic,
                key=message.key,
                value=message.value,
                headers=cast(Any, message.headers),
                on_delivery=self._acked(message.track),
            )
            with self._lock:
                self.sent.append(message)
            self._producer.poll(0)
            next_at += interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _acked(self, track: str) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked[track] = (msg.partition(), msg.offset(), time.time())

        return on_delivery

    def stop(self, timeout: float = 30.0) -> list[Outgoing]:
        """Stop sending, wait for every delivery report; returns everything sent."""
        self._stop.set()
        self._thread.join(10)
        left = self._producer.flush(timeout)
        if left or self.errors:
            raise AssertionError(f"load: {left} undelivered, errors {self.errors[:3]}")
        with self._lock:
            return list(self.sent)


# ----------------------------------------------------------------------------- results


@dataclass
class ScenarioResult:
    """One row of the README "Reliability" table."""

    scenario: str
    fault: str
    sent: int
    lost: int
    duplicated: int
    early: int
    recovery_s: float | None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        scenario: str,
        fault: str,
        report: Report,
        recovery_s: float | None,
        **details: Any,
    ) -> ScenarioResult:
        return cls(
            scenario,
            fault,
            report.sent,
            len(report.lost),
            report.duplicates,
            len(report.early),
            None if recovery_s is None else round(recovery_s, 2),
            {**report.as_dict(), **details},
        )


def record_result(result: ScenarioResult, directory: Path | None = None) -> Path:
    """Write ``<directory>/<scenario>.json`` (default ``.chronos/reliability``)."""
    directory = directory or RESULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{result.scenario}.json"
    payload = {**asdict(result), "recorded_at": datetime.now(UTC).isoformat(timespec="seconds")}
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return path


def render_table(directory: Path | None = None) -> str:
    """The README "Reliability" table from the result files, in scenario order."""
    directory = directory or RESULTS_DIR
    rows = [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]
    lines = [
        "| scenario | fault | messages sent | lost | duplicated | early | recovery time |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        recovery = "—" if r.get("recovery_s") is None else f"{r['recovery_s']:.1f} s"
        lines.append(
            f"| {r['scenario']} | {r['fault']} | {r['sent']} | {r['lost']} | {r['duplicated']} "
            f"| {r['early']} | {recovery} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_table(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
