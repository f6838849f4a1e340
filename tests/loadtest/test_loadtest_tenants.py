"""The multi-tenant load (fairness between tenants): its plan and schedule, the ``run`` options,
the per-tenant Spark analysis and plot on a hand-computed dataset, the bench scenarios and their
verdicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadtest.analysis.summary import analyze_dir
from loadtest.bench import scenarios as sc
from loadtest.bench.evaluation import evaluate
from loadtest.bench.records import BenchRecord
from loadtest.cli import _tenant_load, build_parser
from loadtest.harness.events import RECEIVED_SCHEMA, SENT_SCHEMA
from loadtest.harness.schedule import LagTracker, pace
from loadtest.harness.tenants import FLOOD, PlannedSchedule, TenantLoad, small_name, tenant_class

LOAD = TenantLoad(
    flood_count=6,
    flood_rate=3.0,
    flood_at_ms=10_000,
    small_tenants=2,
    small_rate=1.0,
    small_delay_ms=500,
    duration_s=2.0,
    small_from_ms=250,
)


# ------------------------------------------------------------------------------ the plan


def test_the_plan_merges_the_flood_and_the_small_tenants_in_send_order() -> None:
    plan = LOAD.plan()
    assert LOAD.count == len(plan) == 6 + 4
    assert np.all(np.diff(plan.offsets_s) >= 0)
    flood = plan.offsets_s[plan.tenant == 0]
    assert flood.tolist() == pytest.approx([0, 1 / 3, 2 / 3, 1, 4 / 3, 5 / 3])
    small = plan.tenant[plan.tenant > 0]
    assert small.tolist() == [1, 2, 1, 2]  # round robin
    assert plan.offsets_s[plan.tenant > 0].tolist() == pytest.approx([0.25, 0.75, 1.25, 1.75])
    assert LOAD.tenant_names == [FLOOD, "small-00", "small-01"]
    assert [tenant_class(t) for t in (FLOOD, small_name(3), "x", None)] == [
        "flood",
        "small",
        "none",
        "none",
    ]


def test_pace_follows_the_planned_send_times() -> None:
    now = [100.0]
    sent: list[tuple[int, int, float]] = []
    schedule = PlannedSchedule(LOAD.plan().offsets_s, 100.0)
    assert (schedule.due(99.9), schedule.due(100.0), schedule.due(100.3)) == (0, 1, 2)

    def sleep(seconds: float) -> None:
        now[0] += seconds

    result = pace(
        schedule,
        lambda: now[0],
        sleep,
        lambda first, end: sent.append((first, end, now[0])),
        LagTracker(0.01, 100.0),
    )
    assert result.sent == LOAD.count
    for first, _, at in sent:  # every slot sent at (or just after) its planned time
        assert schedule.slot_time(first) - 1e-6 <= at < schedule.slot_time(first) + 0.01


def test_invalid_loads_are_refused() -> None:
    with pytest.raises(ValueError):
        TenantLoad(1, 0, 1000, 0, 1, 0, 1)  # a flood without a rate
    with pytest.raises(ValueError):
        TenantLoad(0, 1, 1000, 2, 1, 0, 0)  # small tenants without a duration


def test_run_options_round_trip_through_the_harness_arguments() -> None:
    for header in (True, False):
        load = TenantLoad(200_000, 20_000, 30_000, 20, 10, 2_000, 40, 28_500, header=header)
        args = build_parser().parse_args(["run", *load.harness_args()])
        assert _tenant_load(args) == load
    assert _tenant_load(build_parser().parse_args(["run", "--rate", "5"])) is None


# ------------------------------------------------------------------------------ the analysis

BASE = 1_000_000
FLOOD_DUE = BASE + 10_000
# The flood's 10 messages fire 0, 100, ..., 900 ms after their deadline (drain: 9 per 0.9 s).
FLOOD_LATE = [100 * i for i in range(10)]
# Small tenants: small-00 is never late; small-01 waits behind the flood for its first message.
SMALL = [
    ("s0", "small-00", BASE + 5_000, 1),
    ("s1", "small-00", BASE + 10_200, 2),
    ("s2", "small-00", BASE + 15_000, 3),
    ("s3", "small-01", BASE + 10_100, 800),  # due while the flood drains
    ("s4", "small-01", BASE + 15_000, 5),
]


def _write(path: Path) -> None:
    path.mkdir()
    sent: list[dict[str, Any]] = []
    received: list[dict[str, Any]] = []

    def add(mid: str, tenant: str, deadline: int, late: int) -> None:
        sent.append(
            {
                "id": mid,
                "key": None,
                "deadline_ms": deadline,
                "sent_ms": BASE,
                "payload_bytes": 1,
                "slot_ms": BASE,
                "tenant": tenant,
            }
        )
        received.append(
            {
                "id": mid,
                "topic": "out",
                "partition": 0,
                "offset": len(received),
                "deadline_ms": deadline,
                "publish_ms": deadline + late,
                "receive_ms": deadline + late + 1,
                "is_dead_letter": False,
                "dead_letter_reason": None,
                "tenant": tenant,
            }
        )

    for i, late in enumerate(FLOOD_LATE):
        add(f"f{i}", FLOOD, FLOOD_DUE, late)
    for mid, tenant, deadline, late in SMALL:
        add(mid, tenant, deadline, late)
    pq.write_table(pa.Table.from_pylist(sent, schema=SENT_SCHEMA), path / "sent.parquet")
    pq.write_table(
        pa.Table.from_pylist(received, schema=RECEIVED_SCHEMA), path / "received.parquet"
    )
    run = {"run_id": "tenants", "start_ms": BASE, "params": {"timing_advance_ms": 50}}
    (path / "run.json").write_text(json.dumps(run))


@pytest.fixture(scope="module")
def summary(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    results = tmp_path_factory.mktemp("tenants") / "run"
    _write(results)
    return analyze_dir(spark, results)


def _pct(values: list[int], q: float) -> float:
    return round(float(np.percentile(values, q)), 3)


def test_lateness_by_class(summary: dict[str, Any]) -> None:
    classes = summary["tenants"]["classes"]
    small = [late for *_, late in SMALL]
    assert classes["flood"] == {
        "sent": 10,
        "fired": 10,
        "p50_ms": _pct(FLOOD_LATE, 50),
        "p99_ms": _pct(FLOOD_LATE, 99),
        "max_ms": 900,
    }
    assert classes["small"] == {
        "sent": 5,
        "fired": 5,
        "p50_ms": _pct(small, 50),
        "p99_ms": _pct(small, 99),
        "max_ms": 800,
    }


def test_the_small_tenants_while_the_flood_drains(summary: dict[str, Any]) -> None:
    t = summary["tenants"]
    # Due from the flood's deadline to its last fire (BASE + 10,900): s1 and s3 only.
    assert t["small_during_flood"] == {
        "fired": 2,
        "p50_ms": _pct([2, 800], 50),
        "p99_ms": _pct([2, 800], 99),
        "max_ms": 800,
    }
    assert t["small_worst"] == {"tenant": "small-01", "p99_ms": _pct([800, 5], 99)}
    assert t["flood_drain"] == {
        "count": 10,
        "deadline_ms": FLOOD_DUE,
        "first_fired_ms": FLOOD_DUE,
        "last_fired_ms": FLOOD_DUE + 900,
        "seconds": 0.9,
        "rate_per_s": round(10 / 0.9, 1),
    }
    per = {p["tenant"]: (p["class"], p["fired"], p["max_ms"]) for p in t["per_tenant"]}
    assert per == {
        FLOOD: ("flood", 10, 900),
        "small-00": ("small", 3, 3),
        "small-01": ("small", 2, 800),
    }


def test_the_timeline_and_the_plot(summary: dict[str, Any]) -> None:
    t = summary["tenants"]
    rows = {(r["class"], r["second"]): (r["count"], r["p99_ms"]) for r in t["timeline"]}
    assert rows[("flood", 10)] == (10, _pct(FLOOD_LATE, 99))
    assert rows[("small", 5)] == (1, 1)
    assert rows[("small", 10)] == (2, _pct([2, 800], 99))
    out = Path(summary["analysis"]["results_dir"])
    assert (out / "tenants.png").stat().st_size > 0
    assert "tenants.png" in (out / "report.html").read_text()


def test_a_run_without_tenants_has_no_tenant_section(spark: Any, tmp_path: Path) -> None:
    results = tmp_path / "plain"
    _write(results)
    table = pq.read_table(results / "sent.parquet")
    nulls = pa.nulls(table.num_rows, pa.string())
    pq.write_table(table.set_column(6, "tenant", nulls), results / "sent.parquet")
    assert "tenants" not in analyze_dir(spark, results, report=False)


# ------------------------------------------------------------------------------ the bench


def test_the_tenant_scenarios() -> None:
    for quick in (False, True):
        runs = {r.name: r for r in sc.plan(["tenants"], quick=quick)}
        assert list(runs) == [
            "ceiling",
            "tenants",
            "tenants-control",
            "tenants-200k",
            "ceiling-end",
        ]
        main, control, small = (
            runs[n].workload for n in ("tenants", "tenants-control", "tenants-200k")
        )
        assert main is not None and control is not None and small is not None
        assert (
            main.tenants is not None and control.tenants is not None and small.tenants is not None
        )
        assert main.tenants.header and not control.tenants.header
        assert control.tenants == TenantLoad(**{**_fields(main.tenants), "header": False})
        assert (main.tenants.small_tenants, main.tenants.small_rate) == (50, 10)
        assert main.tenants.flood_count == (60_000 if quick else 1_000_000)
        assert (small.tenants.small_tenants, small.tenants.flood_count) == (
            20,
            30_000 if quick else 200_000,
        )
        # The first small message is due 0.5 s after the flood.
        t = small.tenants
        assert t.small_from_ms + t.small_delay_ms == t.flood_at_ms + 500
        # The flood is sent before it is due, and the small tenants send while it drains.
        for w in (main, small):
            assert w.tenants is not None
            assert w.tenants.flood_send_s() * 1000 < w.tenants.flood_at_ms
            # ... and due after a node ingesting 4,000 msg/s has stored it (fairness at the due
            # instant is measured, not the input topic's queue)
            assert w.tenants.flood_at_ms >= w.tenants.flood_count / 4
            assert w.send_seconds * 1000 > w.tenants.flood_at_ms + 5_000
            assert w.messages == w.tenants.count and w.is_burst()
            assert "--small-tenants" in w.harness_args() and "--count" not in w.harness_args()
        assert "--no-tenant-header" in control.harness_args()
    assert "tenants" in sc.DEFAULT_SCENARIOS


def _fields(load: TenantLoad) -> dict[str, Any]:
    return {f: getattr(load, f) for f in TenantLoad.__dataclass_fields__}


def _record(name: str, small_p99: float, during_p99: float, drain_rate: float) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "tenants",
        "status": "ok",
        "summary": {
            "tenants": {
                "classes": {"small": {"p99_ms": small_p99, "max_ms": small_p99 + 1}},
                "small_during_flood": {"p99_ms": during_p99, "fired": 100},
                "small_worst": {"tenant": "small-07", "p99_ms": small_p99},
                "flood_drain": {"rate_per_s": drain_rate, "seconds": 10},
            }
        },
    }


@pytest.mark.parametrize(
    ("during", "rate", "small200k", "expected"),
    [
        (400.0, 9_500.0, 900.0, (True, True)),
        (1_000.0, 9_500.0, 1_000.0, (False, True)),  # under 1 s, and at most 1 s
        (400.0, 8_900.0, 1_001.0, (False, False)),  # 89 % of the control's drain rate
    ],
)
def test_the_tenant_verdicts(
    during: float, rate: float, small200k: float, expected: tuple[bool, bool]
) -> None:
    bench = BenchRecord.from_dict(
        {
            "scenarios": [
                _record("tenants", 300.0, during, rate),
                _record("tenants-control", 20_000.0, 20_000.0, 10_000.0),
                _record("tenants-200k", small200k, small200k, 9_000.0),
            ]
        }
    )
    rows = {r.scenario: r for r in evaluate(bench) if r.scenario.startswith("tenants")}
    assert (rows["tenants"].ok, rows["tenants-200k"].ok) == expected
    assert rows["tenants-control"].ok is None
    assert f"{rate / 10_000:.0%} of the control" in rows["tenants"].measured


def test_a_failed_tenant_scenario_misses_its_target() -> None:
    bench = BenchRecord.from_dict(
        {
            "scenarios": [
                {"name": "tenants-200k", "kind": "tenants", "status": "failed", "error": "x"}
            ]
        }
    )
    (row,) = [r for r in evaluate(bench) if r.scenario == "tenants-200k"]
    assert row.ok is False and row.measured == "x"
