"""Figures derived from a scenario's analysis (``summary.json``), its ``run.json`` and the
sampler's samples: steady rates, backlog growth, burst drain and intake, output offset holes."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from loadtest.bench import scenarios as sc
from loadtest.bench.results.load import (
    BacklogVerdict,
    Check,
    Drain,
    Intake,
    OffsetGap,
    OffsetGaps,
    SteadyRates,
)
from loadtest.bench.results.samples import StackSample
from loadtest.bench.scenarios import Scenario


def steady_rates(
    timeline: Sequence[dict[str, int]], window: tuple[int, int] | None
) -> SteadyRates | None:
    """Mean sent, due and fired per second over the whole seconds ``lo <= s < hi`` since the
    start of sending (the analysis timeline)."""
    if not window:
        return None
    lo, hi = window
    rows = {int(r["second"]): r for r in timeline}
    seconds = list(range(lo, hi))
    if not seconds:
        return None

    def mean(kind: str) -> float:
        return sum(rows.get(s, {}).get(kind, 0) for s in seconds) / len(seconds)

    fired, due = mean("fired"), mean("due")
    return SteadyRates(
        window_s=(lo, hi),
        seconds=len(seconds),
        sent_per_s=round(mean("sent"), 1),
        due_per_s=round(due, 1),
        fired_per_s=round(fired, 1),
        fired_to_due=round(fired / due, 4) if due else None,
    )


def due_not_fired(timeline: Sequence[dict[str, int]]) -> list[tuple[int, int]]:
    """(second, messages due by the end of that second but not yet fired): the end-to-end
    overdue backlog, from the recorded events."""
    out: list[tuple[int, int]] = []
    due = fired = 0
    for row in sorted(timeline, key=lambda r: int(r["second"])):
        due += int(row.get("due", 0))
        fired += int(row.get("fired", 0))
        out.append((int(row["second"]), due - fired))
    return out


def offset_gaps(records: Iterable[tuple[str, int, int]], limit: int = 20) -> OffsetGaps:
    """Holes in the offsets of the recorded (topic, partition, offset) triples.

    Every record on a scenario's own output topics belongs to the run, and Chronos's producers
    are idempotent, not transactional (no control records), so between the first and the last
    offset read from a partition there should be no hole. A hole is a record the broker
    acknowledged and numbered but never served to the recorder: a message it lost, not one
    Chronos lost.
    """
    by_partition: dict[tuple[str, int], list[int]] = {}
    for topic, partition, offset in records:
        by_partition.setdefault((topic, int(partition)), []).append(int(offset))
    gaps: list[OffsetGap] = []
    missing = 0
    for (topic, partition), offsets in sorted(by_partition.items()):
        offsets.sort()
        for a, b in itertools.pairwise(offsets):
            if b > a + 1:
                missing += b - a - 1
                gaps.append(OffsetGap(topic, partition, a + 1, b - 1, b - a - 1))
    return OffsetGaps(missing, gaps[:limit], len(gaps))


def received_gaps(path: Path) -> OffsetGaps | None:
    try:
        import pyarrow.parquet as pq

        table = pq.read_table(path, columns=["topic", "partition", "offset"])
    except Exception:  # noqa: BLE001 - an extra diagnostic, nothing depends on it
        return None
    cols = [table.column(c).to_pylist() for c in ("topic", "partition", "offset")]
    return offset_gaps(zip(*cols, strict=True))


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    var = sum((p[0] - mx) ** 2 for p in points)
    if var == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in points) / var


def backlog_verdict(
    samples: Sequence[StackSample],
    *,
    send_start_ms: int,
    send_end_ms: int,
    rate: float,
    mean_delay_s: float,
    window: tuple[int, int] | None,
    timeline: Sequence[dict[str, int]] = (),
) -> BacklogVerdict:
    """Whether the backlog grew while sending.

    Not growing means, at the end of sending: the table holds about ``rate x mean delay`` rows
    (Little's law; at most ``BACKLOG_TABLE_FACTOR`` times that plus one second of messages),
    the consumer lag is under ``BACKLOG_LAG_SECONDS`` of messages and the messages due but not
    yet fired (end to end, from the recorded events) under ``BACKLOG_E2E_SECONDS``; and, over the
    steady window, the table does not trend upwards (slope under 5 % of the rate), ends within
    ``BACKLOG_FLAT_FRACTION`` of ``rate x mean delay`` (plus one second of messages) of where
    the window started, and the overdue unclaimed rows stay near zero (p90 under
    ``BACKLOG_OVERDUE_SECONDS`` of messages).
    A check without data is skipped.
    """
    expected = rate * mean_delay_s
    sending = [s for s in samples if send_start_ms <= s.t_ms <= send_end_ms]
    at_end = sending[-1] if sending else None
    checks: dict[str, Check] = {}

    def check(name: str, value: float | None, limit: float) -> None:
        if value is None:
            return
        checks[name] = Check(round(value, 2), round(limit, 2), value <= limit)

    rows_end = None if at_end is None else at_end.rows
    check("rows_at_send_end", rows_end, sc.BACKLOG_TABLE_FACTOR * expected + rate)
    lag_end = None if at_end is None else at_end.consumer_lag
    check("consumer_lag_at_send_end", lag_end, sc.BACKLOG_LAG_SECONDS * rate)
    steady: list[StackSample] = []
    if window is not None:
        lo_ms = send_start_ms + window[0] * 1000
        hi_ms = send_start_ms + window[1] * 1000
        steady = [s for s in samples if lo_ms <= s.t_ms <= hi_ms]
    points = [
        ((s.t_ms - send_start_ms) / 1000, float(r)) for s in steady if (r := s.rows) is not None
    ]
    slope = _slope(points)
    check("rows_slope_per_s", slope, 0.05 * rate)
    # Flat: the rows at the end of sending against those at the start of the steady window.
    if points and rows_end is not None:
        check(
            "rows_change_over_window",
            abs(rows_end - points[0][1]),
            sc.BACKLOG_FLAT_FRACTION * expected + rate,
        )
    overdue = [float(o) for s in steady if (o := s.overdue) is not None]
    check("overdue_p90", _percentile(overdue, 0.9), sc.BACKLOG_OVERDUE_SECONDS * rate)
    e2e = None
    if timeline:
        end_second = (send_end_ms - send_start_ms) // 1000 - 1
        series = [v for second, v in due_not_fired(timeline) if second <= end_second]
        e2e = series[-1] if series else None
    check("due_not_fired_at_send_end", e2e, sc.BACKLOG_E2E_SECONDS * rate)
    return BacklogVerdict(
        expected_rows=round(expected),
        rows_at_send_end=rows_end,
        max_rows=max((r for s in sending if (r := s.rows) is not None), default=None),
        max_overdue=max((o for s in sending if (o := s.overdue) is not None), default=None),
        checks=checks,
        growing=any(not c.ok for c in checks.values()) if checks else None,
    )


def _summary_subset(summary: dict[str, Any]) -> dict[str, Any]:
    counts = dict(summary.get("counts", {}))
    counts.pop("lost_sample", None)
    tp = summary.get("throughput", {})
    return {
        "counts": counts,
        "lateness_ms": summary.get("lateness_ms"),
        "receive_lateness_ms": summary.get("receive_lateness_ms"),
        "early": summary.get("early"),
        "producer": summary.get("producer"),
        "window": summary.get("window"),
        "throughput": {
            k: tp.get(k) for k in ("sent_mean_per_s", "fired_mean_per_s", "fired_peak_per_s")
        },
        "lost_sample": summary.get("counts", {}).get("lost_sample", [])[:5],
        "delivery": summary.get("delivery"),
        # A multi-tenant load's fairness figures (the per-second timeline stays in summary.json).
        "tenants": {k: v for k, v in (summary.get("tenants") or {}).items() if k != "timeline"}
        or None,
    }


def fill_from_summary(
    rec: dict[str, Any],
    scenario: Scenario,
    summary: dict[str, Any],
    run: dict[str, Any],
    samples: Sequence[StackSample],
    rate: float,
) -> None:
    """The figures derived from the analysis and the samples (pure: unit-tested)."""
    assert scenario.workload is not None
    w = scenario.workload
    rec["summary"] = _summary_subset(summary)
    timeline = summary.get("throughput", {}).get("timeline", [])
    window = w.steady_window_s()
    steady = steady_rates(timeline, window)
    rec["steady"] = None if steady is None else steady.as_dict()
    producer = run.get("producer", {})
    start_ms = int(run.get("start_ms") or producer.get("start_ms") or 0)
    end_ms = int(producer.get("end_ms") or start_ms + w.send_seconds * 1000)
    rec["send"] = {
        "start_ms": start_ms,
        "end_ms": end_ms,
        "achieved_rate": producer.get("achieved_rate"),
        "max_lag_ms": producer.get("max_lag_ms"),
        "behind_messages": producer.get("behind_messages"),
    }
    if w.background is not None:
        # The table also holds the background's rows (due in an hour): the backlog of the
        # measured load cannot be told apart from them, so it is not judged.
        rec["backlog"] = None
    elif not w.is_burst():
        _, mean_delay, _ = w.delay_bounds_s()
        rec["backlog"] = backlog_verdict(
            samples,
            send_start_ms=start_ms,
            send_end_ms=end_ms,
            rate=rate,
            mean_delay_s=mean_delay,
            window=window,
            timeline=timeline,
        ).as_dict()
    else:
        win = summary.get("window", {})
        first, last = win.get("first_fired_ms"), win.get("last_fired_ms")
        fired = summary.get("counts", {}).get("fired_distinct", 0)
        seconds = (last - first) / 1000 if first is not None and last is not None else None
        rec["drain"] = Drain(
            count=fired,
            first_fired_ms=first,
            last_fired_ms=last,
            seconds=None if seconds is None else round(seconds, 3),
            rate_per_s=round(fired / seconds, 1) if seconds else None,
        ).as_dict()
        target = 0.999 * w.messages
        stored = next((s for s in samples if (r := s.rows) is not None and r >= target), None)
        after = None if stored is None else round((stored.t_ms - start_ms) / 1000, 1)
        rec["intake"] = Intake(
            stored_after_s=after,
            rate_per_s=round(w.messages / after, 1) if after else None,
        ).as_dict()
