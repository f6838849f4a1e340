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

Only a partition *lost* is remembered: one handed over (revoked) has its offsets stored and
committed as it goes, its next owner moves the commit on, and it is forgotten. And the offset
is used only when the group holds a commit for the partition: a group without one has a log new
to it (the coordinator deletes a deleted topic's offsets; the topic created again starts at 0),
where an offset of the old log would skip the new log's records; the client's reset
(``auto.offset.reset=earliest``) starts it, and the offset dropped is counted as the client's
own resets are (``chronos_intake_offsets_out_of_range_total``: what the old log held past it
was never read). A commit that cannot be read leaves the offset used.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping

from confluent_kafka import Consumer, KafkaException, TopicPartition

from chronos.config.settings import Settings
from chronos.observability import metrics

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
    durable: MutableMapping[tuple[str, int], int],
    settings: Settings,
) -> None:
    """In the assignment callback: assign ``partitions`` so that those in ``durable`` resume
    after what this node made durable when the group's commit is behind it (else leave the
    assignment to the client); an offset of a log the group holds no commit for is dropped."""
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
        committed = {(c.topic, c.partition): c.offset for c in answer if c.error is None}
    except KafkaException as exc:
        log.info("could not read the committed offsets (%s); resuming after durable ones", exc)
        committed = {}
    moved, dropped = [], []
    for p in partitions:
        ours = known.get((p.topic, p.partition))
        theirs = committed.get((p.topic, p.partition))
        if theirs is not None and theirs < 0:  # a log new to the group (a re-created topic)
            dropped.append(f"{p.topic}[{p.partition}]@{durable.pop((p.topic, p.partition))}")
        elif ours is not None and ours > (-1 if theirs is None else theirs):
            p.offset = ours
            moved.append(f"{p.topic}[{p.partition}]@{ours}")
    if dropped:
        metrics.OFFSETS_OUT_OF_RANGE.inc(len(dropped))
        log.warning(
            "%s: the group holds no commit for these partitions (their topic deleted and created "
            "again?): they start at the log start, not after what this node made durable",
            dropped,
            extra={"event": "partitions_reset"},
        )
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
