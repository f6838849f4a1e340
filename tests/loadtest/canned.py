"""Canned ``bench.json`` records for the verdict and report tests: a run in which every
scenario meets its targets, and its rows as ``bench.json`` holds them."""

from __future__ import annotations

from typing import Any

from loadtest.bench import evaluation
from loadtest.bench.records import BenchRecord


def scenario_record(name: str, kind: str, **extra: Any) -> dict[str, Any]:
    """A scenario's ``bench.json`` record that meets its targets, with ``extra`` keys replaced."""
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


def passing_bench() -> dict[str, Any]:
    """A whole ``bench.json`` in which every scenario meets its targets (a fresh copy)."""
    return {
        "command": "python -m loadtest bench",
        "scenarios": [
            {
                "name": "ceiling",
                "kind": "ceiling",
                "status": "ok",
                "result": {"ceiling_msg_per_s": 25_000.0},
            },
            scenario_record("sustained", "sustained"),
            scenario_record("sustained2", "sustained2", nodes=2),
            scenario_record(
                "saturate", "saturate", steady={"fired_per_s": 18_500.0}, backlog={"growing": True}
            ),
            scenario_record("precision", "precision"),
            scenario_record(
                "burst",
                "burst",
                workload={"count": 1_000_000},
                drain={"rate_per_s": 26_000.0, "seconds": 38.5},
                node_counters={"published_directly": 0},
            ),
            scenario_record("backlog-10k", "backlog", preload_rows=10_000),
            scenario_record(
                "backlog-10m",
                "backlog",
                preload_rows=10_000_000,
                claim={"mean_ms": 2.6, "p99_ms": 12.0},
            ),
        ],
    }


def target_rows(bench_dict: dict[str, Any]) -> list[dict[str, Any]]:
    """The target rows as bench.json holds them."""
    return [r.as_dict() for r in evaluation.evaluate(BenchRecord.from_dict(bench_dict))]
