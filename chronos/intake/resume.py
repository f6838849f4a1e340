"""Where an input partition resumes when it comes back to the node that held it.

The consumer group's coordinator lives on one broker. When that broker dies, the coordinator
moves only once the controller fences it (``broker.session.timeout.ms``, 9 s by default); a
consumer whose session timeout is shorter loses its assignment meanwhile, and every offset
commit since the broker died has failed. When the group forms again the partition would resume
at its last commit, seconds behind what this node had already made durable, and every record
replayed whose message had fired meanwhile would fire again.

So intake remembers, per partition, the offset after the last record it made durable (inserted,
published or dead-lettered), and a partition it gets back resumes at the later of that offset
and the group's commit: every record before either is durable, so nothing is skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException, TopicPartition

from chronos.config.settings import Settings

log = logging.getLogger(__name__)

COMMITTED_TIMEOUT_S = 5.0


def incremental(settings: Settings) -> bool:
    """Whether the group assigns incrementally (the cooperative assignor, or the broker-side
    protocol) rather than all at once (an eager assignor set by a pass-through property)."""
    if settings.group_protocol == "consumer":
        return True
    strategy = str(
        settings.consumer_properties.get("partition.assignment.strategy", "cooperative-sticky")
    )
    return "cooperative" in strategy


def resume_after_durable(
    consumer: Consumer,
    partitions: list[TopicPartition],
    durable: Mapping[tuple[str, int], int],
    settings: Settings,
) -> None:
    """In the assignment callback: assign ``partitions`` so that those in ``durable`` resume
    after what this node made durable when the group's commit is behind it (else leave the
    assignment to the client)."""
    known = {
        (p.topic, p.partition): durable[(p.topic, p.partition)]
        for p in partitions
        if (p.topic, p.partition) in durable
    }
    if not known:
        return
    try:
        answer = consumer.committed(
            [TopicPartition(t, p) for t, p in known], timeout=COMMITTED_TIMEOUT_S
        )
        committed = {(c.topic, c.partition): c.offset for c in answer}
    except KafkaException as exc:
        log.info("could not read the committed offsets (%s); resuming after durable ones", exc)
        committed = {}
    moved = []
    for p in partitions:
        ours = known.get((p.topic, p.partition))
        if ours is not None and ours > committed.get((p.topic, p.partition), -1):
            p.offset = ours
            moved.append(f"{p.topic}[{p.partition}]@{ours}")
    if not moved:
        return
    if incremental(settings):
        consumer.incremental_assign(partitions)
    else:
        consumer.assign(partitions)
    log.info(
        "resuming %s after what this node made durable (the group's commit is behind)",
        moved,
        extra={"event": "partitions_resumed"},
    )
