from __future__ import annotations

import pytest

from loadtest.harness.schedule import LagTracker, PacingResult, RateSchedule, pace


class FakeClock:
    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


def test_slot_times_are_absolute() -> None:
    s = RateSchedule(rate=4.0, start=10.0, total=6)
    assert [s.slot_time(i) for i in range(3)] == [10.0, 10.25, 10.5]
    assert s.slot_time(1_000_000) == pytest.approx(10.0 + 250_000)  # no accumulated error
    assert s.due(9.999) == 0
    assert s.due(10.0) == 1
    assert s.due(10.2499) == 1
    assert s.due(10.25) == 2
    assert s.due(10.9) == 4
    assert s.due(99.0) == 6  # capped at total


def test_due_exact_boundaries_for_awkward_rates() -> None:
    s = RateSchedule(rate=3.0, start=0.0, total=1000)
    for i in range(1000):
        assert s.due(s.slot_time(i)) == i + 1


@pytest.mark.parametrize("rate", [0.0, -1.0, float("inf"), float("nan")])
def test_rate_must_be_positive(rate: float) -> None:
    with pytest.raises(ValueError, match="rate"):
        RateSchedule(rate=rate, start=0.0, total=1)


def _run(
    rate: float, total: int, emit_cost: float, stall_at: int | None = None, stall: float = 0
) -> tuple[RateSchedule, LagTracker, list[tuple[int, float]], PacingResult, FakeClock]:
    clock = FakeClock()
    schedule = RateSchedule(rate, clock(), total)
    tracker = LagTracker(threshold_s=0.010, start=clock())
    sent_at: list[tuple[int, float]] = []

    def emit(first: int, end: int) -> None:
        if stall_at is not None and first <= stall_at < end:
            clock.now += stall
        for i in range(first, end):
            sent_at.append((i, clock.now))
        clock.now += emit_cost

    result = pace(schedule, clock, clock.sleep, emit, tracker, max_batch=100)
    return schedule, tracker, sent_at, result, clock


def test_keeps_up_when_sender_is_fast() -> None:
    schedule, tracker, sent_at, result, _ = _run(rate=1000, total=500, emit_cost=0.0001)
    assert [i for i, _ in sent_at] == list(range(500))
    for i, t in sent_at:
        assert t >= schedule.slot_time(i)  # never early
        assert t - schedule.slot_time(i) < 0.010
    assert tracker.behind_slots == 0
    assert tracker.episodes == []
    assert result.sent == 500 and not result.stopped
    assert result.elapsed_s == pytest.approx(0.5, abs=0.01)


def test_stall_is_recorded_and_rate_does_not_drift() -> None:
    # 1000 msg/s for 2 s; the sender freezes for 0.5 s at message 300, then catches up.
    schedule, tracker, sent_at, result, _ = _run(
        rate=1000, total=2000, emit_cost=0.0001, stall_at=300, stall=0.5
    )
    assert [i for i, _ in sent_at] == list(range(2000))
    # An accumulating ("sleep 1/rate after each send") pacer would finish at ~2.5 s.
    assert result.elapsed_s == pytest.approx(2.0, abs=0.02)
    assert tracker.max_lag_s == pytest.approx(0.5, abs=0.01)
    assert len(tracker.episodes) == 1
    episode = tracker.episodes[0]
    assert episode.first_slot == 301  # the slots after the stalled batch are overdue
    assert episode.max_lag_ms == pytest.approx(500, abs=10)
    # About 0.5 s worth of messages (~500) were sent more than 10 ms late.
    assert 450 <= tracker.behind_slots <= 520
    # Messages long after the stall are on time again.
    late_tail = [t - schedule.slot_time(i) for i, t in sent_at if i > 1500]
    assert max(late_tail) < 0.010


def test_slow_sender_falls_behind_but_sends_everything() -> None:
    # Each batch costs 30 ms: the sender can never be on time, but it sends in bulk.
    _schedule, tracker, sent_at, result, _ = _run(rate=1000, total=1000, emit_cost=0.030)
    assert len(sent_at) == 1000
    assert tracker.behind_slots > 0
    assert tracker.max_lag_s >= 0.029
    assert result.elapsed_s < 1.1  # throughput preserved by batching overdue slots


def test_should_stop() -> None:
    clock = FakeClock()
    schedule = RateSchedule(100, clock(), 1000)
    tracker = LagTracker(0.01, clock())
    sent: list[int] = []
    result = pace(
        schedule,
        clock,
        clock.sleep,
        lambda a, b: sent.extend(range(a, b)),
        tracker,
        should_stop=lambda: len(sent) >= 10,
    )
    assert result.stopped
    assert 10 <= result.sent < 1000


def test_zero_messages() -> None:
    clock = FakeClock()
    result = pace(
        RateSchedule(10, clock(), 0), clock, clock.sleep, lambda a, b: None, LagTracker(0.01, 0)
    )
    assert result.sent == 0
