"""The fakes of ``chronos.testing`` behave like the real things they stand for."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from chronos.testing import FakeConsumer, FakePublisher, ManualClock, make_record


def _collect() -> tuple[list[KafkaError | None], object]:
    reports: list[KafkaError | None] = []
    return reports, reports.append


def test_publisher_reports_on_poll_not_on_produce() -> None:
    publisher = FakePublisher()
    reports, report = _collect()
    publisher.produce("t", b"k", b"v", [("h", None)], report)  # type: ignore[arg-type]
    assert reports == []
    assert len(publisher) == 1
    assert publisher.poll(0) == 1
    assert reports == [None]
    assert len(publisher) == 0
    (record,) = publisher.delivered("t")
    assert (record.key, record.value, record.headers) == (b"k", b"v", [("h", None)])


def test_publisher_lets_the_test_decide_each_delivery() -> None:
    publisher = FakePublisher(auto=False)
    reports, report = _collect()
    for i in range(3):
        publisher.produce("t", None, str(i).encode(), [], report)  # type: ignore[arg-type]
    assert publisher.poll(0) == 0
    first, second, third = publisher.pending()
    publisher.deliver([first])
    publisher.fail([second], KafkaError.MSG_SIZE_TOO_LARGE)
    assert publisher.poll(0) == 2
    assert reports[0] is None
    assert reports[1] is not None and reports[1].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert publisher.flush(0.01) == 1  # the third is still outstanding
    publisher.deliver()
    assert publisher.flush(1) == 0
    assert [r.value for r in publisher.delivered()] == [b"0", b"2"]
    with pytest.raises(ValueError):
        publisher.deliver([third])


def test_publisher_decide_and_fail_next() -> None:
    publisher = FakePublisher(decide=lambda r: KafkaError(KafkaError._FAIL) if r.key else None)
    reports, report = _collect()
    publisher.fail_next(1)
    publisher.produce("t", None, b"", [], report)  # type: ignore[arg-type]
    publisher.produce("t", b"key", b"", [], report)  # type: ignore[arg-type]
    publisher.produce("t", None, b"", [], report)  # type: ignore[arg-type]
    publisher.flush(1)
    codes = [r.code() if r is not None else None for r in reports]
    assert codes == [KafkaError._MSG_TIMED_OUT, KafkaError._FAIL, None]


def test_publisher_poll_waits_for_a_report_then_returns_early() -> None:
    publisher = FakePublisher(auto=False)
    _reports, report = _collect()
    publisher.produce("t", None, b"", [], report)  # type: ignore[arg-type]
    threading.Timer(0.05, publisher.deliver).start()
    started = time.monotonic()
    assert publisher.poll(5) == 1
    assert time.monotonic() - started < 2


def test_publisher_timestamps_like_create_time() -> None:
    clock = ManualClock(datetime(2030, 1, 1, 0, 0, 0, 123456, tzinfo=UTC))
    publisher = FakePublisher(wall_clock=lambda: clock.now().timestamp())
    publisher.produce("t", None, None, [], lambda _e: None)
    assert publisher.records[0].timestamp_ms % 1000 == 123


def test_manual_clock_moves_both_clocks_together_exactly() -> None:
    clock = ManualClock()
    start, mono = clock.now(), clock.monotonic()
    for _ in range(1000):
        clock.advance(0.1)
    assert clock.now() - start == timedelta(milliseconds=100)
    assert clock.monotonic() - mono == pytest.approx(0.1, abs=1e-9)
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_consumer_hands_out_batches_and_keeps_offsets() -> None:
    consumer = FakeConsumer()
    consumer.feed(make_record("in", 0, i, None, b"") for i in range(5))
    assert [m.offset() for m in consumer.consume(3, 0)] == [0, 1, 2]
    assert [m.offset() for m in consumer.consume(3, 0)] == [3, 4]
    assert consumer.consume(3, 0.01) == []
    with pytest.raises(KafkaException):
        consumer.commit(asynchronous=False)  # nothing stored: like librdkafka's _NO_OFFSET
    consumer.store_offsets(offsets=[TopicPartition("in", 0, 5)])
    consumer.commit(asynchronous=False)
    assert consumer.committed == {("in", 0): 5}
