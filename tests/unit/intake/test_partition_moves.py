"""Intake while an input partition moves to another shard (``chronos shards move``), on the
fakes: once a shard's fence refuses the partition (the move marked it moving), its messages are
not stored anywhere and no offset past them is committed, while the other partitions flow; once
the moves say it has moved, it is read again from its first record not stored, and its messages
go to its new shard."""

from __future__ import annotations

import threading
from typing import cast

import pytest
from confluent_kafka import Consumer, TopicPartition

from chronos.config.shards import ShardMap, parse_shard_map
from chronos.intake.loop import IntakeLoop
from chronos.intake.partitions.shards import ShardRouter
from chronos.store.moves import MOVED, MOVING, PartitionMove
from chronos.testing import FakeConsumer, FakePublisher, InMemoryStore, ManualClock
from tests.unit.helpers import INPUT, settings
from tests.unit.intake.helpers import wait_for
from tests.unit.intake.test_shards import Records, ids


def test_a_moving_partition_is_held_and_then_read_again_into_its_new_shard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("chronos.intake.partitions.shards.MOVES_REFRESH_S", 3600.0)
    clock = ManualClock()
    shards = [InMemoryStore(clock), InMemoryStore(clock)]
    shards[1].shard = 1
    consumer = FakeConsumer()
    loop = IntakeLoop(
        settings(),
        shards[0],
        FakePublisher(),
        lambda **_: cast(Consumer, consumer),
        clock=clock.now,
        shards=shards,
        shard_map=ShardMap(2),
    )
    builder = Records(clock)
    consumer.rebalance([TopicPartition(INPUT, 0), TopicPartition(INPUT, 1)])
    consumer.feed([builder.record(f"p{i % 2}-{i}", 60_000, partition=i % 2) for i in range(4)])
    thread = threading.Thread(target=loop.run)
    thread.start()
    try:
        assert wait_for(lambda: consumer.stored.get((INPUT, 1)) == 2)
        assert ids(shards[1]) == {"p1-1", "p1-3"}  # partition 1 is shard 1's (mod 2)

        # The move marks partition 1 moving in every shard: shard 1's fence refuses it (the
        # moves the node read an hour ago do not say so yet).
        for store in shards:
            store.moves = [PartitionMove(1, 0, MOVING, 1)]
        consumer.feed(
            [builder.record(f"p{i % 2}-{i}", 60_000, partition=i % 2) for i in range(4, 8)]
        )
        assert wait_for(lambda: consumer.stored.get((INPUT, 0)) == 4)  # partition 0 flows
        assert wait_for(lambda: (INPUT, 1) in consumer.paused)
        assert consumer.stored[(INPUT, 1)] == 2  # nothing past its first record refused
        assert ids(shards[0]) == {"p0-0", "p0-2", "p0-4", "p0-6"} and ids(shards[1]) == set()
        assert loop.router.moves[1].state == MOVING

        # Moved: read again from its first record not stored (offset 2), into shard 0.
        for store in shards:
            store.moves = [PartitionMove(1, 0, MOVED, 2)]
        loop.router._refreshed_at = 0.0  # the next read of the moves (every second)
        assert wait_for(lambda: consumer.stored.get((INPUT, 1)) == 4, 5)
        assert (INPUT, 1, 2) in consumer.seeks and not consumer.paused
        assert ids(shards[0]) == {"p1-5", "p1-7"}
        assert loop.router.shard_of(1) == 0 and loop.router.shard_of(3) == 1
    finally:
        loop.stop()
        thread.join(10)
    assert not thread.is_alive()


def test_a_partition_moved_to_a_shard_this_node_does_not_know_is_held() -> None:
    """A node whose settings predate a shard added since cannot write there: it holds the
    partition (its next owner, or the node restarted with the new shard, reads it)."""
    clock = ManualClock()
    loop = IntakeLoop(
        settings(),
        InMemoryStore(clock),
        FakePublisher(),
        lambda **_: cast(Consumer, FakeConsumer()),
        shards=[InMemoryStore(clock), InMemoryStore(clock)],
        shard_map=ShardMap(2),
    )
    loop.router.moves = {4: PartitionMove(4, 2, MOVED, 3), 5: PartitionMove(5, 0, MOVED, 3)}
    assert loop.router.shard_of(4) is None and loop.router.shard_of(5) == 0
    assert loop.router.shard_of(6) == 0 and loop.router.shard_of(7) == 1
    loop.router.close()


def test_a_partition_an_explicit_map_does_not_name_is_held_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A partition added to the input topic since the node started, and not in its explicit
    map: held (its messages deferred, its offsets never committed), said once, the node runs."""
    clock = ManualClock()
    router = ShardRouter(
        [InMemoryStore(clock), InMemoryStore(clock)], parse_shard_map("0-1:0,2-3:1", 2), INPUT
    )
    assert router.shard_of(3) == 1 and router.shard_of(4) is None and router.shard_of(4) is None
    said = [r for r in caplog.records if getattr(r, "event", "") == "partition_unmapped"]
    assert len(said) == 1 and "CHRONOS_SHARD_MAP" in said[0].getMessage()
    assert router.route([], [], lambda *_: []) == []
    router.close()
