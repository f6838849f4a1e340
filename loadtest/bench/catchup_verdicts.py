"""The verdict of the ``catchup`` scenario on its figures (``loadtest.bench.results.catchup``):
the overdue backlog fires at ``CHRONOS_CATCHUP_RATE`` ± ``CATCHUP_RATE_TOLERANCE`` (first fire
to last), the stream due after the restart keeps a p99 lateness <= ``CATCHUP_STREAM_P99_MS``,
nothing is lost and nothing of the backlog fires before the nodes are back."""

from __future__ import annotations

from loadtest.analysis.delivery import Row
from loadtest.bench import scenarios as sc
from loadtest.bench.records import BenchRecord, ScenarioRecord


def catchup_rows(bench: BenchRecord) -> list[Row]:
    return [_row(rec) for rec in bench.by_kind("catchup")]


def _row(rec: ScenarioRecord) -> Row:
    c = rec.catchup
    tolerance = sc.CATCHUP_RATE_TOLERANCE
    rate = "CHRONOS_CATCHUP_RATE" if c is None else f"{c.catchup_rate:,.0f} msg/s"
    target = (
        f"backlog fires at {rate} ±{tolerance:.0%}; the stream's p99 lateness <= "
        f"{sc.CATCHUP_STREAM_P99_MS:,.0f} ms while it drains; lost 0"
    )
    if not rec.ok or c is None:
        return Row(rec.name, target, rec.error or "did not run (or no catch-up figures)", False)
    busiest = "n/a" if c.busiest_window_per_s is None else f"{c.busiest_window_per_s:,.0f}"
    measured = (
        f"{c.backlog_fired:,} of {c.backlog_sent:,} fired in {c.drain_s or 0:,.1f} s = "
        f"{c.backlog_rate_per_s or 0:,.0f} msg/s (busiest 5 s: {busiest}/s); stream p99 "
        f"{'n/a' if c.stream_p99_ms is None else f'{c.stream_p99_ms:,.0f} ms'} over "
        f"{c.stream_measured:,} msgs ({c.stream_during_drain:,} due during the drain); lost "
        f"{c.backlog_lost + c.stream_lost}"
    )
    low, high = (1 - tolerance) * c.catchup_rate, (1 + tolerance) * c.catchup_rate
    ok = (
        c.backlog_rate_per_s is not None
        and low <= c.backlog_rate_per_s <= high
        and c.stream_p99_ms is not None
        and c.stream_p99_ms <= sc.CATCHUP_STREAM_P99_MS
        and c.backlog_lost == 0
        and c.stream_lost == 0
        and c.fired_before_restart == 0
    )
    return Row(rec.name, target, measured, ok)
