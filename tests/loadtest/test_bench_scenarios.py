"""The scenarios of ``python -m loadtest bench``: the full and quick plans, the workloads'
harness arguments and windows, and the command line that selects them."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.bench import scenarios as sc
from loadtest.cli import build_parser


def test_full_plan() -> None:
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
        "catchup",
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
