"""The benchmark's result types: what they write is what bench.json always held, and reading it
back gives the same figures (``bench --render`` reads earlier runs)."""

from __future__ import annotations

from typing import Any

from loadtest.analysis.delivery import Row
from loadtest.bench import records
from loadtest.bench.results.cpu import CpuUsage
from loadtest.bench.results.load import BacklogVerdict, Drain, SteadyRates
from loadtest.bench.results.node import Profile, RankedFunction, StatementStats
from loadtest.bench.results.samples import StackSample


def test_statement_stats_keep_their_shapes() -> None:
    unobserved = {"count": 0, "mean_ms": None, "p50_ms": None, "p99_ms": None}
    claim = {
        "count": 10,
        "mean_ms": 1.5,
        "p50_ms": 1.0,
        "p99_ms": 4.0,
        "p99_9_ms": 4.9,
        "per_s": 2.5,
        "rows_per_claim": 12.5,
    }
    delete = {**claim, "rows_per_statement": None}
    del delete["rows_per_claim"]
    for data in (unobserved, claim, delete):
        assert StatementStats.from_dict(data).as_dict() == data
    assert StatementStats.from_dict(claim).rows == 12.5


def test_backlog_steady_drain_round_trip() -> None:
    backlog: dict[str, Any] = {
        "expected_rows": 65_000,
        "rows_at_send_end": 60_100,
        "max_rows": 61_000,
        "max_overdue": 12,
        "checks": {"overdue_p90": {"value": 3.0, "limit": 1000.0, "ok": True}},
        "growing": False,
    }
    verdict = BacklogVerdict.from_dict(backlog)
    assert verdict is not None and verdict.as_dict() == backlog
    steady = {
        "window_s": [11, 60],
        "seconds": 49,
        "sent_per_s": 1000.0,
        "due_per_s": 1000.0,
        "fired_per_s": 999.5,
        "fired_to_due": 0.9995,
    }
    rates = SteadyRates.from_dict(steady)
    assert rates is not None and rates.as_dict() == steady
    drain = Drain(1000, 1, 2001, 2.0, 500.0)
    assert Drain.from_dict(drain.as_dict()) == drain
    assert Drain.from_dict(None) is None and SteadyRates.from_dict(None) is None


def test_profile_and_cpu_round_trip() -> None:
    failed = Profile(samples=0, error="py-spy not found")
    assert failed.as_dict() == {"error": "py-spy not found", "samples": 0, "self": [], "total": []}
    assert Profile.from_dict(failed.as_dict()) == failed
    ranked = [RankedFunction("f (a.py)", 3, 75.0)]
    profile = Profile(samples=4, self=ranked, total=ranked, threads={"thread (1)": 4})
    assert Profile.from_dict(profile.as_dict()) == profile
    cpu = CpuUsage(wall_s=10.0, nodes_s=4.0, per_node_s={"0": 4.0}, other_s=0.5)
    assert CpuUsage.from_dict(cpu.as_dict()) == cpu
    assert cpu.get("nodes_s") == 4.0 and cpu.get("per_node_s") is None


def test_sparse_records_read_as_not_measured() -> None:
    """Older or failed runs lack figures: they read as None, never as an error."""
    bench = records.BenchRecord.from_dict(
        {
            "scenarios": [
                {"name": "burst", "kind": "burst", "status": "failed", "error": "node exited"},
                {"name": "ceiling", "kind": "ceiling", "status": "ok", "result": {}},
            ],
            "targets": [{"scenario": "all", "target": "t", "measured": "m", "pass": None}],
        }
    )
    burst, ceiling = bench.scenarios
    assert not burst.ok and burst.error == "node exited" and burst.lateness is None
    assert burst.counts.lost is None and burst.growing is None and burst.drain is None
    assert burst.delivery_figures.lost is None and burst.delivery_figures.location is None
    assert ceiling.ok and ceiling.ceiling_msg_per_s is None
    assert bench.targets == [Row("all", "t", "m", None, "")]
    assert bench.started == "?" and bench.command == "" and not bench.quick


def test_stack_sample_writes_the_samples_json_line() -> None:
    line = {
        "t_ms": 1_000,
        "load1": 1.5,
        "rss_mb_0": 80.5,
        "rss_mb_1": None,
        "waiting": 60_000,
        "claimed": 100,
        "overdue": 3,
        "oldest_overdue_s": 0.25,
        "consumer_lag": 12.0,
        "in_flight": 4.0,
    }
    sample = StackSample.from_dict(line)
    assert sample.as_dict() == line and list(sample.as_dict()) == list(line)
    assert sample.rows == 60_100 and sample.overdue == 3 and sample.rss_mb == {0: 80.5, 1: None}
    # The database did not answer: no table keys at all, and no rows.
    missed = {k: v for k, v in line.items() if k not in ("waiting", "claimed", "overdue")}
    del missed["oldest_overdue_s"]
    unanswered = StackSample.from_dict(missed)
    assert unanswered.table is None and unanswered.rows is None
    assert unanswered.as_dict() == missed
