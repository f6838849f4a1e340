"""Offset gaps (chronos.intake.partitions.gaps): a consumed record past the offset expected next in
its partition makes intake read the partition again from the offset expected until the gap is
filled (recovered: the broker had skipped records) or the same answer comes from a read started
once it has settled (confirmed: a real gap); no record is ever stepped over."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, Message, TopicPartition
from prometheus_client import REGISTRY

from chronos.intake.partitions.gaps import SETTLE_S, OffsetGaps
from chronos.testing import FakeConsumer, make_record
from tests.support.kafka import chronos_headers
from tests.unit.helpers import INPUT
from tests.unit.intake.helpers import Intake, wait_for

TOPIC = "in"


def rec(partition: int, offset: int) -> Message:
    return make_record(TOPIC, partition, offset, b"k", b"v", [])


def offsets(records: list[Message]) -> list[tuple[int, int]]:
    return [(int(r.partition() or 0), int(r.offset() or 0)) for r in records]


def gaps(outcome: str) -> float:
    return REGISTRY.get_sample_value("chronos_intake_offset_gaps_total", {"outcome": outcome}) or 0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def checked(gap_check: OffsetGaps, consumer: FakeConsumer, records: list[Message]) -> Any:
    return offsets(gap_check.check(cast(Consumer, consumer), records))


def test_contiguous_offsets_pass_untouched() -> None:
    consumer, gap_check = FakeConsumer(), OffsetGaps()
    batch = [rec(0, 5), rec(1, 9), rec(0, 6), rec(1, 10)]
    assert gap_check.check(cast(Consumer, consumer), batch) is batch
    assert checked(gap_check, consumer, [rec(0, 7), rec(1, 11)]) == [(0, 7), (1, 11)]
    assert consumer.seeks == []


def test_a_skipped_range_is_read_again_and_recovered() -> None:
    consumer, gap_check = FakeConsumer(), OffsetGaps()
    recovered = gaps("recovered")
    assert checked(gap_check, consumer, [rec(0, 1), rec(0, 2)]) == [(0, 1), (0, 2)]
    # The broker skipped offsets 3 and 4 of partition 0: its records from the gap on are left
    # out of this batch (the other partition's are not), and partition 0 is read again from 3.
    batch = [rec(1, 1), rec(0, 5), rec(1, 2), rec(0, 6)]
    assert checked(gap_check, consumer, batch) == [(1, 1), (1, 2)]
    assert consumer.seeks == [(TOPIC, 0, 3)]
    # The second read finds them.
    again = [rec(0, 3), rec(0, 4), rec(0, 5), rec(0, 6)]
    assert checked(gap_check, consumer, again) == [(0, 3), (0, 4), (0, 5), (0, 6)]
    assert gaps("recovered") == recovered + 1
    assert consumer.seeks == [(TOPIC, 0, 3)]


def test_a_real_gap_is_read_again_once_settled_then_stepped_over() -> None:
    clock = Clock()
    consumer, gap_check = FakeConsumer(), OffsetGaps(clock)
    confirmed = gaps("confirmed")
    checked(gap_check, consumer, [rec(0, 1)])
    assert checked(gap_check, consumer, [rec(0, 3), rec(0, 4)]) == []  # offset 2: a marker
    assert consumer.seeks == [(TOPIC, 0, 2)]
    # The same answer at once proves nothing (the broker may still be storing offset 2): the
    # partition's records are left out until the answer has settled, then read once more.
    assert checked(gap_check, consumer, [rec(0, 3), rec(0, 4)]) == []
    assert gap_check.reread_due(cast(Consumer, consumer), 0.5) == pytest.approx(SETTLE_S)
    assert consumer.seeks == [(TOPIC, 0, 2)]
    clock.now += SETTLE_S
    assert gap_check.reread_due(cast(Consumer, consumer), 0.5) == 0.5
    assert consumer.seeks == [(TOPIC, 0, 2), (TOPIC, 0, 2)]
    assert checked(gap_check, consumer, [rec(0, 3), rec(0, 4)]) == [(0, 3), (0, 4)]
    assert gaps("confirmed") == confirmed + 1


def test_every_gap_is_read_again_even_just_after_a_real_one() -> None:
    """A real gap does not make the partition's next gaps go unchecked: each costs two seeks."""
    clock = Clock()
    consumer, gap_check = FakeConsumer(), OffsetGaps(clock)
    checked(gap_check, consumer, [rec(0, 1)])
    assert checked(gap_check, consumer, [rec(0, 3)]) == []
    assert checked(gap_check, consumer, [rec(0, 3)]) == []
    clock.now += SETTLE_S
    gap_check.reread_due(cast(Consumer, consumer), 0.5)
    assert checked(gap_check, consumer, [rec(0, 3)]) == [(0, 3)]  # confirmed
    assert checked(gap_check, consumer, [rec(0, 5)]) == []  # at once: read again
    assert checked(gap_check, consumer, [rec(0, 4), rec(0, 5)]) == [(0, 4), (0, 5)]
    assert consumer.seeks == [(TOPIC, 0, 2), (TOPIC, 0, 2), (TOPIC, 0, 4)]


def test_skips_close_together_are_all_read_again() -> None:
    """The broker skipping twice in one partition within a second (seen in a benchmark run):
    both are read again."""
    consumer, gap_check = FakeConsumer(), OffsetGaps(Clock())
    checked(gap_check, consumer, [rec(0, 1)])
    assert checked(gap_check, consumer, [rec(0, 4)]) == []
    assert checked(gap_check, consumer, [rec(0, 2), rec(0, 3), rec(0, 4)]) == [
        (0, 2),
        (0, 3),
        (0, 4),
    ]
    assert checked(gap_check, consumer, [rec(0, 9)]) == []
    assert consumer.seeks == [(TOPIC, 0, 2), (TOPIC, 0, 5)]


class ScriptedConsumer(FakeConsumer):
    """A broker still storing a partition's records: the n-th read from the start (0) or after
    the n-th seek hands out ``reads[n]`` (the last one again after that)."""

    def __init__(self, reads: list[list[int]]) -> None:
        super().__init__()
        self.reads = reads
        self.feed(rec(0, n) for n in reads[0])

    def seek(self, partition: TopicPartition) -> None:
        super().seek(partition)
        with self._cond:
            answer = self.reads[min(len(self.seeks), len(self.reads) - 1)]
            self._queue = [rec(0, n) for n in answer if n >= partition.offset]


def taken_by_reading(consumer: ScriptedConsumer, clock: Clock, rounds: int = 20) -> list[int]:
    """Every offset the gap check lets through while reading ``consumer`` (as the loop does)."""
    gap_check, taken = OffsetGaps(clock), []
    for _ in range(rounds):
        clock.now += gap_check.reread_due(cast(Consumer, consumer), SETTLE_S) + 0.001
        batch = consumer.consume(10, timeout=0)
        taken += [off for _, off in checked(gap_check, consumer, batch)]
    return taken


def test_a_read_again_that_starts_inside_the_gap_does_not_step_over_its_start() -> None:
    """Offsets 0, 1, 5, 6, then after the seek to 2 the broker has stored 3 and 4 but not yet 2:
    2 is not stepped over (it is read again until it is there)."""
    recovered = gaps("recovered")
    consumer = ScriptedConsumer([[0, 1, 5, 6], [3, 4, 5, 6], [2, 3, 4, 5, 6]])
    assert taken_by_reading(consumer, Clock()) == [0, 1, 2, 3, 4, 5, 6]
    assert consumer.seeks == [(TOPIC, 0, 2), (TOPIC, 0, 2)]
    assert gaps("recovered") == recovered + 1


def test_a_read_again_into_the_same_unwritten_window_does_not_step_over_it() -> None:
    """The second read gives the same answer (the missing batch is not stored yet): not a real
    gap yet; once it has settled, the next read finds the records."""
    confirmed = gaps("confirmed")
    consumer = ScriptedConsumer([[0, 1, 5, 6], [5, 6], [2, 3, 4, 5, 6]])
    assert taken_by_reading(consumer, Clock()) == [0, 1, 2, 3, 4, 5, 6]
    assert gaps("confirmed") == confirmed


def test_a_gap_the_broker_keeps_filling_is_read_until_filled() -> None:
    consumer = ScriptedConsumer([[0, 1, 9], *(list(range(start, 10)) for start in range(8, 1, -1))])
    assert taken_by_reading(consumer, Clock()) == list(range(10))


def test_a_real_gap_costs_two_reads() -> None:
    confirmed = gaps("confirmed")
    consumer = ScriptedConsumer([[0, 1, 5, 6], [5, 6]])
    assert taken_by_reading(consumer, Clock()) == [0, 1, 5, 6]
    assert consumer.seeks == [(TOPIC, 0, 2), (TOPIC, 0, 2)]
    assert gaps("confirmed") == confirmed + 1


def test_a_partition_assigned_or_sought_again_has_no_expected_offset() -> None:
    consumer, gap_check = FakeConsumer(), OffsetGaps()
    checked(gap_check, consumer, [rec(0, 1)])
    gap_check.forget([(TOPIC, 0)])
    assert checked(gap_check, consumer, [rec(0, 40)]) == [(0, 40)]
    assert consumer.seeks == []


def test_error_records_are_kept_in_place() -> None:
    from confluent_kafka import KafkaError

    consumer, gap_check = FakeConsumer(), OffsetGaps()
    checked(gap_check, consumer, [rec(0, 1)])
    error = make_record(TOPIC, 0, -1, None, None, None, error=KafkaError(KafkaError._TRANSPORT))
    kept = gap_check.check(cast(Consumer, consumer), [rec(0, 3), error, rec(1, 1)])
    assert kept[0] is error and offsets(kept[1:]) == [(1, 1)]


class SkippingConsumer(FakeConsumer):
    """Hands each of ``skip`` (partition, offset) out only when read again (after a seek), as a
    broker whose fetch skipped them."""

    def __init__(self, skip: set[tuple[int, int]]) -> None:
        super().__init__()
        self.skip = skip

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        batch = super().consume(num_messages, timeout)
        handed = [r for r in batch if (r.partition(), r.offset()) not in self.skip]
        self.skip -= {(int(r.partition() or 0), int(r.offset() or 0)) for r in batch}
        return handed


def test_intake_stores_the_records_a_fetch_skipped() -> None:
    """The loop end to end on the fakes: the consumer hands partition 0's offsets 1, 2, 5, 6
    (the broker skipped 3 and 4); every message is stored and the offsets stored end at 7."""
    intake = Intake()
    intake.consumer = consumer = SkippingConsumer({(0, 3), (0, 4)})
    later = intake.clock.now() + timedelta(minutes=10)
    consumer.feed(
        make_record(INPUT, 0, n, b"k", b"v", chronos_headers(f"m{n}", later)) for n in range(1, 7)
    )
    worker = threading.Thread(target=intake.loop.run)
    worker.start()
    try:
        assert wait_for(lambda: consumer.stored.get((INPUT, 0)) == 7)
        assert all(intake.store.get_message(f"m{n}") is not None for n in range(1, 7))
        assert consumer.seeks == [(INPUT, 0, 3)]
    finally:
        intake.loop.stop()
        worker.join(10)
