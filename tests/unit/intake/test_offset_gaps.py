"""Offset gaps (chronos.intake.gaps): a consumed record past the offset expected next in its
partition makes intake read the partition again from the offset expected, once; what the second
read finds decides (recovered: the broker had skipped records; confirmed: a real gap)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, cast

from confluent_kafka import Consumer, Message
from prometheus_client import REGISTRY

from chronos.intake.gaps import RECHECK_INTERVAL_S, OffsetGaps
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


def test_a_real_gap_is_read_again_once_then_stepped_over() -> None:
    consumer, gap_check = FakeConsumer(), OffsetGaps()
    confirmed = gaps("confirmed")
    checked(gap_check, consumer, [rec(0, 1)])
    assert checked(gap_check, consumer, [rec(0, 3), rec(0, 4)]) == []  # offset 2: a marker
    assert consumer.seeks == [(TOPIC, 0, 2)]
    assert checked(gap_check, consumer, [rec(0, 3), rec(0, 4)]) == [(0, 3), (0, 4)]
    assert gaps("confirmed") == confirmed + 1
    assert consumer.seeks == [(TOPIC, 0, 2)]


def test_within_a_second_of_a_real_gap_gaps_are_stepped_over() -> None:
    clock = Clock()
    consumer, gap_check = FakeConsumer(), OffsetGaps(clock)
    unchecked = gaps("unchecked")
    checked(gap_check, consumer, [rec(0, 1)])
    assert checked(gap_check, consumer, [rec(0, 3)]) == []
    assert checked(gap_check, consumer, [rec(0, 3)]) == [(0, 3)]  # confirmed
    # Another gap within the second (a compacted or transactional topic): stepped over.
    clock.now += RECHECK_INTERVAL_S / 2
    assert checked(gap_check, consumer, [rec(0, 5)]) == [(0, 5)]
    assert gaps("unchecked") == unchecked + 1
    # Another partition has its own allowance.
    checked(gap_check, consumer, [rec(1, 1)])
    assert checked(gap_check, consumer, [rec(1, 3)]) == []
    # A second later, partition 0 is read again.
    clock.now += RECHECK_INTERVAL_S
    assert checked(gap_check, consumer, [rec(0, 7)]) == []
    assert consumer.seeks == [(TOPIC, 0, 2), (TOPIC, 1, 2), (TOPIC, 0, 6)]


def test_skips_close_together_are_all_read_again() -> None:
    """The broker skipping twice in one partition within a second (seen in a benchmark run):
    both are read again; only a real gap makes the next ones wait."""
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
