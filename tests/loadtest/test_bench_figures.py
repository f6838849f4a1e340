"""Figures derived from a scenario's analysis and samples: steady rates, the backlog verdict, a
burst's drain and intake, output offset holes, and the sampler's stall watch."""

from __future__ import annotations

from typing import Any

import pytest

from loadtest.bench import figures, sampling
from loadtest.bench import scenarios as sc
from loadtest.bench.results.samples import StackSample, TableCounts


def _timeline(seconds: int, rate: int, fired_factor: float = 1.0) -> list[dict[str, int]]:
    return [
        {"second": s, "sent": rate, "due": rate, "fired": int(rate * fired_factor), "received": 0}
        for s in range(seconds)
    ]


def test_steady_rates_and_due_not_fired() -> None:
    timeline = _timeline(70, 1000)
    timeline[20]["fired"] = 400  # one slow second
    steady = figures.steady_rates(timeline, (11, 60))
    assert steady is not None
    assert steady.seconds == 49 and steady.due_per_s == 1000
    assert steady.fired_per_s == pytest.approx((48 * 1000 + 400) / 49, abs=0.1)
    assert figures.steady_rates(timeline, None) is None
    series = dict(figures.due_not_fired(timeline))
    assert series[19] == 0 and series[20] == 600 and series[69] == 600


def _samples(
    start_ms: int, seconds: int, rows: Any, overdue: Any = 0, lag: float = 50
) -> list[StackSample]:
    return [
        StackSample(
            t_ms=start_ms + 1000 * t,
            table=TableCounts(
                waiting=rows(t),
                claimed=100,
                overdue=overdue(t) if callable(overdue) else overdue,
            ),
            consumer_lag=lag,
        )
        for t in range(seconds)
    ]


def test_backlog_flat() -> None:
    start = 1_000_000
    samples = _samples(start, 62, lambda t: min(t, 10) * 6_000)
    verdict = figures.backlog_verdict(
        samples,
        send_start_ms=start,
        send_end_ms=start + 60_000,
        rate=10_000,
        mean_delay_s=6.5,
        window=(11, 60),
        timeline=_timeline(70, 10_000),
    )
    assert verdict.growing is False
    assert verdict.expected_rows == 65_000 and verdict.rows_at_send_end == 60_100
    assert set(verdict.checks) == {
        "rows_at_send_end",
        "consumer_lag_at_send_end",
        "rows_slope_per_s",
        "overdue_p90",
        "due_not_fired_at_send_end",
        "rows_change_over_window",
    }
    flat = verdict.checks["rows_change_over_window"]
    assert flat.value == 0 and flat.limit == 0.1 * 65_000 + 10_000


def test_backlog_growing_is_caught() -> None:
    start = 0
    # Firing keeps up with only 80 %: the table grows 2,000 rows a second, rows go overdue.
    samples = _samples(start, 62, lambda t: 6_000 * min(t, 10) + 2_000 * t, lambda t: 200 * t)
    verdict = figures.backlog_verdict(
        samples,
        send_start_ms=start,
        send_end_ms=start + 60_000,
        rate=10_000,
        mean_delay_s=6.5,
        window=(11, 60),
        timeline=_timeline(70, 10_000, 0.8),
    )
    assert verdict.growing is True
    checks = verdict.checks
    assert not checks["rows_slope_per_s"].ok and not checks["overdue_p90"].ok
    assert not checks["due_not_fired_at_send_end"].ok
    # A lagging intake alone (table flat, consumer lag large) also counts as growing.
    lagging = _samples(start, 62, lambda t: 1_000, lag=80_000)
    v2 = figures.backlog_verdict(
        lagging, send_start_ms=0, send_end_ms=60_000, rate=10_000, mean_delay_s=6.5, window=None
    )
    assert v2.growing is True and not v2.checks["consumer_lag_at_send_end"].ok
    assert (
        figures.backlog_verdict(
            [], send_start_ms=0, send_end_ms=1, rate=1, mean_delay_s=1, window=None
        ).growing
        is None
    )


def test_fill_from_summary_burst() -> None:
    scenario = next(r for r in sc.plan(["burst"]) if r.name == "burst-1m")
    summary = {
        "counts": {"sent": 1_000_000, "fired_distinct": 1_000_000, "lost": 0},
        "window": {"first_fired_ms": 120_000, "last_fired_ms": 160_000},
        "throughput": {"timeline": []},
    }
    run = {"start_ms": 0, "producer": {"start_ms": 0, "end_ms": 50_000, "achieved_rate": 2e4}}
    samples = [StackSample(t * 1000, table=TableCounts(12_000 * t, 0, None)) for t in range(100)]
    rec: dict[str, Any] = {}
    figures.fill_from_summary(rec, scenario, summary, run, samples, 20_000)
    assert rec["drain"]["rate_per_s"] == 25_000 and rec["drain"]["seconds"] == 40
    assert rec["intake"]["stored_after_s"] == 84  # first sample holding >= 99.9 %
    assert rec["steady"] is None and "backlog" not in rec


def test_fill_from_summary_intake_does_not_judge_the_mixed_backlog() -> None:
    """The table also holds the background's hour-ahead rows: no backlog verdict."""
    scenario = next(r for r in sc.plan(["intake"], quick=True) if r.kind == "intake")
    summary = {"counts": {"sent": 10_000}, "throughput": {"timeline": []}}
    run = {"start_ms": 0, "producer": {"start_ms": 0, "end_ms": 10_000}}
    samples = [StackSample(t * 1000, table=TableCounts(9_000 * t, 0, 0)) for t in range(12)]
    rec: dict[str, Any] = {}
    figures.fill_from_summary(rec, scenario, summary, run, samples, 1_000)
    assert rec["backlog"] is None and "drain" not in rec


def test_offset_gaps() -> None:
    records = [("out", 0, o) for o in range(100) if not 40 <= o <= 45]
    records += [("out", 4, o) for o in (5, 3, 4, 9)] + [("dl", 0, 7)]
    gaps = figures.offset_gaps(records).as_dict()
    assert gaps["missing"] == 6 + 3 and gaps["gap_count"] == 2
    assert gaps["gaps"][0] == {"topic": "out", "partition": 0, "first": 40, "last": 45, "count": 6}
    assert gaps["gaps"][1]["first"] == 6 and gaps["gaps"][1]["last"] == 8
    assert figures.offset_gaps([]).missing == 0


def test_stall_watch() -> None:
    watch = sampling.StallWatch(seconds=10)
    assert not watch.stalled(0, 100, 0)
    # Nothing due: a quiet node is not stalled, however long.
    assert not any(watch.stalled(t, 100, 0) for t in range(1, 30))
    # Rows overdue and the fired counter frozen: reported once, after 10 s.
    # (counted from t=29, the last sample without overdue rows)
    assert not any(watch.stalled(t, 100, 5_000) for t in range(30, 39))
    assert watch.stalled(39, 100, 5_000)
    assert not watch.stalled(40, 100, 5_000)
    moving = sampling.StallWatch(seconds=10)
    assert not any(moving.stalled(t, 100 + t, 5_000) for t in range(60))
    assert not sampling.StallWatch().stalled(0, None, 5)
