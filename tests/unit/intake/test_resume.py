"""Where an input partition resumes when it comes back (chronos.intake.partitions.resume), driven
through the fake consumer's group events: a partition handed over (revoked) comes back at the
group's commit, never at an offset this node remembers from before (the topic may have been deleted
and created again meanwhile: a new log, whose records that offset would skip); a partition lost
resumes after what this node made durable while the group holds a commit behind it, and at the
client's reset when the group holds none (a log new to the group)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import TopicPartition
from prometheus_client import REGISTRY

from tests.unit.helpers import INPUT
from tests.unit.intake.helpers import Intake, wait_for

P0 = TopicPartition(INPUT, 0)


def _resets() -> float:
    return REGISTRY.get_sample_value("chronos_intake_offsets_out_of_range_total") or 0.0


@contextmanager
def running(t: Intake) -> Iterator[None]:
    thread = threading.Thread(target=t.loop.run)
    thread.start()
    try:
        yield
    finally:
        t.loop.stop()
        thread.join(5)


def _held_and_made_durable(t: Intake) -> None:
    """Partition 0 assigned, its records at offsets 1 and 2 made durable and stored."""
    t.consumer.rebalance([P0])
    t.consumer.feed([t.record("a", 60_000), t.record("b", 60_000)])
    assert wait_for(lambda: t.consumer.stored.get((INPUT, 0)) == 3)
    t.consumer.committed[(INPUT, 0)] = 3  # committed as the partition goes


def _gone_and_back(t: Intake, *, lost: bool, commit: int | None) -> None:
    """Partition 0 revoked (or lost); the input topic deleted and created again meanwhile (the
    coordinator drops the group's offsets of a deleted topic); ``commit``: what another member
    committed of the new log; then partition 0 given back to this node."""
    t.consumer.revoke([P0], lost=lost)
    assert wait_for(lambda: not t.loop.assigned)
    del t.consumer.committed[(INPUT, 0)]
    if commit is not None:
        t.consumer.committed[(INPUT, 0)] = commit
    t.consumer.rebalance([P0])
    assert wait_for(lambda: (INPUT, 0) in t.loop.assigned)


def test_a_partition_handed_over_comes_back_at_the_groups_commit_not_an_old_offset() -> None:
    """Its next owner read one record of the re-created topic's log and committed offset 1: the
    node resumes there, not at 3 (which would skip the new log's records 1 and 2)."""
    t = Intake()
    with running(t):
        _held_and_made_durable(t)
        _gone_and_back(t, lost=False, commit=1)
    assert t.consumer.assigned == []  # left to the client: the group's commit
    assert t.loop.settlement.durable == {}


def test_a_partition_handed_over_to_a_re_created_topic_starts_its_new_log() -> None:
    t = Intake()
    with running(t):
        _held_and_made_durable(t)
        _gone_and_back(t, lost=False, commit=None)
    assert t.consumer.assigned == []  # the client's reset: the new log's start


def test_a_lost_partition_of_a_re_created_topic_starts_its_new_log() -> None:
    """Lost, the offset made durable is kept (resume.py), but the group holds no commit for the
    partition: a log new to it, where offset 3 of the old log means nothing."""
    t = Intake()
    resets = _resets()
    with running(t):
        _held_and_made_durable(t)
        _gone_and_back(t, lost=True, commit=None)
    assert t.consumer.assigned == []
    assert _resets() == resets + 1  # what the old log held past it was never read: counted
    assert t.loop.settlement.durable == {}


def test_a_lost_partition_resumes_after_what_was_made_durable_when_the_commit_is_behind() -> None:
    """The coordinator's broker died: the commit of offset 3 failed, the group holds 1."""
    t = Intake()
    with running(t):
        _held_and_made_durable(t)
        _gone_and_back(t, lost=True, commit=1)
    assert t.consumer.assigned == [(INPUT, 0, 3)]
