"""The bounds fault scenarios assert, derived from the settings a node runs with and from the
promises of docs/architecture.md ("What a node crash costs") and docs/reliability.md ("How many
duplicates"), never picked to make a run pass.

* **takeover** (a dead node's claims reset and fired again): its last heartbeat is at most the
  kill, it is seen dead once that heartbeat is older than the liveness window, the leader's
  sweep runs every detection interval, and the row fires at the survivor's next poll:
  window + detection + poll, + ``MARGIN_S``.
* **input failover** (a dead node's input partitions consumed by a survivor): the consumer
  session timeout, then the group's rebalance (the survivor's next heartbeat, join, sync):
  session + ``JOIN_MARGIN_S``. A record produced into such a partition meanwhile can be late by
  that, less its delay.
* **copies after a crash**: only of rows the dead node held claimed, or of records it had
  consumed past the group's committed offsets (read again by the next owner); ``in_flight``
  names them; after a frozen or unreachable broker, only of rows claimed while it lasted
  (``ClaimWatch``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

import psycopg
from confluent_kafka import Consumer, TopicPartition

from chronos.config.settings import Settings
from chronos.kafka.config import consumer_config
from tests.support.checker import TRACKING_HEADER, Load, Outgoing, Report
from tests.support.cluster import Cluster, Table

MARGIN_S = 1.5
"""Scheduling noise of a shared 2-core machine running nodes, Postgres, the broker and the
checker: added once to each derived bound."""

JOIN_MARGIN_S = 5.0
"""A rebalance after a member's session lapsed: the survivor learns it at its next heartbeat
(1.5 s), then joins and syncs (cooperative-sticky: one or two rounds)."""

ACK_GRACE_S = 0.5
"""A record the broker appended before a fault may be reported to the load's thread this much
later (its next poll of the producer): it counts as acknowledged before the fault."""

ON_TIME_MS = 1000
"""Lateness of a message no fault touched (neither held by a node at its death nor produced into
a partition that changed hands): the README promises milliseconds on a quiet node; this is a
node under a fault's aftermath on a shared machine."""


def takeover_s(settings: Settings) -> float:
    """Seconds from a node's death until its claims fire elsewhere."""
    return (
        settings.liveness_window_ms
        + settings.failure_detection_interval_ms
        + settings.poll_interval_ms
    ) / 1000 + MARGIN_S


def session_s(settings: Settings) -> float:
    """The consumer's session timeout (``CHRONOS_CONSUMER__SESSION_TIMEOUT_MS`` or the
    default)."""
    return int(consumer_config(settings)["session.timeout.ms"]) / 1000


def input_failover_s(settings: Settings) -> float:
    """Seconds from a node's death until its input partitions are consumed by a survivor."""
    return session_s(settings) + JOIN_MARGIN_S


def committed_offsets(cluster: Cluster) -> dict[int, int]:
    """The consumer group's committed offset of each input partition (negative: none)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": cluster.settings().consumer_group,
            "enable.auto.commit": False,
        }
    )
    try:
        parts = [TopicPartition(cluster.topics.input, p) for p in range(cluster.topics.partitions)]
        return {tp.partition: tp.offset for tp in consumer.committed(parts, timeout=10)}
    finally:
        consumer.close()


def past_commit(cluster: Cluster) -> set[str]:
    """The tracks (``TRACKING_HEADER``) of the input records past the group's committed offsets
    now (all partitions): what a new owner may read again, by name."""
    committed = committed_offsets(cluster)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "past-commit",
            "enable.auto.commit": False,
        }
    )
    try:
        wanted: list[TopicPartition] = []
        ends: dict[int, int] = {}
        for partition in range(cluster.topics.partitions):
            tp = TopicPartition(cluster.topics.input, partition)
            low, high = consumer.get_watermark_offsets(tp, timeout=10)
            start = max(committed.get(partition, low), low)
            if start < high:
                wanted.append(TopicPartition(cluster.topics.input, partition, start))
                ends[partition] = high
        consumer.assign(wanted)
        tracks: set[str] = set()
        deadline = time.monotonic() + 30
        while ends and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            track = dict(message.headers() or []).get(TRACKING_HEADER)
            if isinstance(track, bytes):
                tracks.add(track.decode())
            at, end = message.offset(), ends.get(message.partition() or 0)
            if at is not None and end is not None and at + 1 >= end:
                ends.pop(message.partition() or 0)
        assert not ends, f"partitions not read to their end in 30 s: {sorted(ends)}"
        return tracks
    finally:
        consumer.close()


def in_flight(
    acked: Mapping[str, tuple[int, int, float]],
    committed: Mapping[int, int],
    partitions: Iterable[int],
    before: float,
) -> set[str]:
    """The records of ``partitions`` at or past the group's ``committed`` offsets that were
    acknowledged before ``before`` (epoch seconds, the fault; + ``ACK_GRACE_S``): what the next
    owner reads again. ``acked`` is ``Load.acked`` (track -> partition, offset, when), read once
    the load has stopped (a report can come after the fault)."""
    wanted = set(partitions)
    return {
        track
        for track, (partition, offset, when) in acked.items()
        if partition in wanted
        and offset >= max(committed.get(partition, 0), 0)
        and when < before + ACK_GRACE_S
    }


def lateness(report: Report, messages: Sequence[Outgoing]) -> dict[str, int]:
    """Track -> ms its first copy fired after its deadline, for the fired ``messages``."""
    return {
        m.track: report.fired_at[m.track] - m.expectation.deadline_ms
        for m in messages
        if m.track in report.fired_at and m.expectation.deadline_ms is not None
    }


def copies_outside(report: Report, allowed: set[str]) -> dict[str, int]:
    """Duplicated tracks (-> copies) that are not in ``allowed``."""
    return {t: n for t, n in report.duplicated.items() if t not in allowed}


class ClaimWatch:
    """Every row claimed at any moment while it runs (sampled every ``every`` seconds on a
    thread of its own): the rows a fault can copy when what was produced into a frozen or
    unreachable broker reaches its log after all."""

    FIRST_SAMPLE_S = 10.0  # how long entering waits for the first sample

    def __init__(self, table: Table, every: float = 0.2) -> None:
        self.table = table
        self.every = every
        self.ids: set[str] = set()
        self._stop = threading.Event()
        self._sampled = threading.Event()
        self._thread = threading.Thread(target=self._run, name="claim-watch", daemon=True)

    def _run(self) -> None:
        while True:
            with contextlib.suppress(psycopg.Error):
                self.ids.update(
                    r[0]
                    for r in self.table.rows(
                        "SELECT id FROM chronos_messages WHERE readied_at IS NOT NULL"
                    )
                )
                self._sampled.set()
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> ClaimWatch:
        """Starts sampling and returns once the first sample is in: a fault started right after
        must not beat it (on a loaded machine the first connection can take longer than that)."""
        self._thread.start()
        assert self._sampled.wait(self.FIRST_SAMPLE_S), "the claim watch could not read the table"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


class Rebalances:
    """The records a load's partitions may replay across some rebalances: for each, those past
    the group's committed offsets when it began and acknowledged before it began. A partition's
    owner stores its offsets when it is revoked (the consumer commits them as it hands the
    partition over) and a node stopped with SIGTERM commits before it leaves, so what a new
    owner reads again is what was read and not yet committed when the rebalance began."""

    def __init__(self, cluster: Cluster, load: Load) -> None:
        self.cluster = cluster
        self.load = load
        self.began: list[tuple[dict[int, int], float]] = []  # committed offsets, epoch seconds

    @contextlib.contextmanager
    def one(self) -> Iterator[None]:
        committed = committed_offsets(self.cluster)
        self.began.append((committed, time.time()))
        yield

    @property
    def ids(self) -> set[str]:
        """The records in flight at any of them (read once the load has stopped)."""
        partitions = range(self.cluster.topics.partitions)
        acked = dict(self.load.acked)
        return {t for c, began in self.began for t in in_flight(acked, c, partitions, began)}

    @property
    def count(self) -> int:
        return len(self.began)
