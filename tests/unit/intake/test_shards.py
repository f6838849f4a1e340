"""Intake over two shards (chronos.intake.partitions.shards), on the fakes: each message goes to
its input partition's shard; while shard 1's database is away, its partition is paused and its
offsets never stored (nothing past a message not stored), while shard 0's partition flows; once
the database answers, the partition is read again from its first record not stored and flows."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, TopicPartition

from chronos.config.shards import ShardMap
from chronos.errors import StoreError
from chronos.intake.loop import IntakeLoop
from chronos.intake.partitions.shards import ShardRouter
from chronos.store import Outcome
from chronos.testing import FakeConsumer, FakePublisher, InMemoryStore, ManualClock, make_record
from tests.support.kafka import chronos_headers
from tests.unit.helpers import INPUT, settings
from tests.unit.intake.helpers import wait_for


class Flaky(InMemoryStore):
    """A shard whose database is away while ``away`` is set (its statements and pings fail as an
    unreachable database's do)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.away = threading.Event()

    def enqueue(self, messages: Any, *args: Any, **kwargs: Any) -> list[Outcome]:
        if self.away.is_set():
            raise StoreError("connection refused", outage=True)
        return super().enqueue(messages, *args, **kwargs)

    def ping(self) -> Any:
        if self.away.is_set():
            raise StoreError("connection refused", outage=True)
        return super().ping()


class Records:
    """Input records, each partition's offsets counted from 0 as the broker numbers them."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.next: dict[int, int] = {}

    def record(self, message_id: str, in_ms: int, *, partition: int) -> Any:
        offset = self.next.get(partition, 0)
        self.next[partition] = offset + 1
        due = self.clock.now() + timedelta(milliseconds=in_ms)
        return make_record(INPUT, partition, offset, b"k", b"v", chronos_headers(message_id, due))


def ids(store: InMemoryStore) -> set[str]:
    return {r.id for r in store.claim("00000000-0000-0000-0000-000000000001", 10**9, 1000, 4)}


@pytest.fixture
def sharded() -> tuple[IntakeLoop, FakeConsumer, list[Flaky], Records]:
    clock = ManualClock()
    shards = [Flaky(clock), Flaky(clock)]
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
    return loop, consumer, shards, Records(clock)


def test_a_shard_away_holds_its_partition_only_and_it_is_read_again_once_back(
    sharded: tuple[IntakeLoop, FakeConsumer, list[Flaky], Records],
) -> None:
    loop, consumer, shards, builder = sharded
    consumer.rebalance([TopicPartition(INPUT, 0), TopicPartition(INPUT, 1)])
    shards[1].away.set()
    first = [builder.record(f"p{i % 2}-{i}", 60_000, partition=i % 2) for i in range(6)]
    consumer.feed(first)  # three records in each partition, interleaved
    thread = threading.Thread(target=loop.run)
    thread.start()
    try:
        assert wait_for(lambda: consumer.stored.get((INPUT, 0)) == 3)  # after its last, 2
        assert ids(shards[0]) == {"p0-0", "p0-2", "p0-4"}
        assert (INPUT, 1) in consumer.paused
        assert (INPUT, 1) not in consumer.stored  # nothing past a message not stored
        later = [builder.record(f"p{i % 2}-{i}", 60_000, partition=i % 2) for i in range(6, 10)]
        consumer.feed(later)  # shard 0's go on; shard 1's wait behind the pause
        assert wait_for(lambda: consumer.stored.get((INPUT, 0)) == 5)
        assert ids(shards[0]) == {"p0-6", "p0-8"}
        assert (INPUT, 1) not in consumer.stored and ids(shards[1]) == set()

        shards[1].away.clear()  # the database answers: read again from its first record (0)
        assert wait_for(lambda: consumer.stored.get((INPUT, 1)) == 5, 5)  # after its last, 4
        assert consumer.seeks == [(INPUT, 1, 0)] and not consumer.paused
        assert ids(shards[1]) == {"p1-1", "p1-3", "p1-5", "p1-7", "p1-9"}
    finally:
        loop.stop()
        thread.join(10)
    assert not thread.is_alive()
    assert consumer.committed[(INPUT, 1)] == 5 and consumer.committed[(INPUT, 0)] == 5


def test_one_shard_waits_an_outage_out_as_ever(
    sharded: tuple[IntakeLoop, FakeConsumer, list[Flaky], Records],
) -> None:
    """One database: no partition is paused, the batch is retried until it is stored."""
    clock = ManualClock()
    store, consumer = Flaky(clock), FakeConsumer()
    loop = IntakeLoop(settings(), store, FakePublisher(), lambda **_: cast(Consumer, consumer))
    builder = sharded[3]
    store.away.set()
    consumer.feed([builder.record("only", 60_000, partition=1)])
    thread = threading.Thread(target=loop.run)
    thread.start()
    try:
        assert not wait_for(lambda: bool(consumer.stored), 1.0)
        assert not consumer.paused
        store.away.clear()
        assert wait_for(lambda: bool(consumer.stored), 10)
    finally:
        loop.stop()
        thread.join(10)
    assert not thread.is_alive()


class Pinged(InMemoryStore):
    """A shard whose pings are counted."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pings = 0
        self.answers = False

    def ping(self) -> Any:
        self.pings += 1
        if not self.answers:
            raise StoreError("connection refused", outage=True)
        return super().ping()


def test_every_shard_away_is_probed_in_turn_and_resumed_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("chronos.intake.partitions.shards.PROBE_INTERVAL_S", 0.0)
    clock = ManualClock()
    shards = [Pinged(clock) for _ in range(3)]
    router = ShardRouter(shards, ShardMap(3), INPUT)
    fake = FakeConsumer()
    consumer = cast(Consumer, fake)
    router.away = {1, 2}
    router.held = {1: 0, 2: 0}
    router.paused = {1, 2}
    shards[2].answers = True  # shard 2 is back, shard 1 still away

    def back() -> bool:
        router.tick(consumer)
        return 2 not in router.away

    assert wait_for(back, 5)
    assert router.away == {1} and router.paused == {1} and shards[1].pings >= 1
    assert fake.seeks == [(INPUT, 2, 0)]
    router.close()


def test_a_paused_partition_revoked_is_resumed_for_whoever_gets_it_next() -> None:
    clock = ManualClock()
    router = ShardRouter([Pinged(clock), Pinged(clock)], ShardMap(2), INPUT)
    fake = FakeConsumer()
    consumer = cast(Consumer, fake)
    router.away, router.held, router.paused = {1}, {1: 4}, {1}
    fake.pause([TopicPartition(INPUT, 1)])
    router.forget(consumer, [TopicPartition(INPUT, 1)])
    assert not fake.paused and not router.held and not router.paused
    router.close()


def test_a_held_partition_is_released_only_by_a_batch_consumed_after_its_seek() -> None:
    """A batch read before the seek (prepared while a statement was under way) may hold the
    partition's later records: storing its offsets would pass the records not stored."""
    clock = ManualClock()
    router = ShardRouter([Pinged(clock), Pinged(clock)], ShardMap(2), INPUT)
    fake = FakeConsumer()
    consumer = cast(Consumer, fake)
    before = router.next_batch()  # consumed before the seek
    router.held = {1: 10}
    router._seek(consumer, [1])
    after = router.next_batch()
    offsets = {(INPUT, 1): 30}
    router.hold(consumer, before, {(INPUT, 1): 20}, offsets, set(), set())
    assert offsets == {} and router.held == {1: 10}  # stripped: not released
    offsets = {(INPUT, 1): 15}
    router.hold(consumer, after, {(INPUT, 1): 10}, offsets, set(), set())
    assert offsets == {(INPUT, 1): 15} and router.held == {}  # read again from 10: released
    router.close()
