"""The ``catchup`` bench scenario: its plan (the issue's size; ``--quick`` the fault suite's CI
size), its figures from what the load generators recorded, and its verdict in the outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadtest.bench import driver
from loadtest.bench import scenarios as sc
from loadtest.bench.catchup import Fire, busiest_window, figures
from loadtest.bench.results.catchup import CatchupFigures

BACK_MS = 100_000.0


def test_the_full_and_quick_plans() -> None:
    (full,) = [r for r in sc.plan(["catchup"]) if r.kind == "catchup"]
    assert full.nodes == 2
    assert full.extra == {"catchup_rate": 2_000, "stream_rate": 100, "away_s": 60.0}
    backlog = full.workload
    assert backlog is not None and backlog.count == 60_000 and backlog.is_burst()
    assert backlog.send_seconds + 10 < backlog.delay_bounds_s()[0]  # stored before it is due
    assert backlog.drain_timeout_s >= 60 + 60_000 / 2_000  # the window holds away + drain
    (quick,) = [r for r in sc.plan(["catchup"], quick=True) if r.kind == "catchup"]
    assert quick.extra == {"catchup_rate": 500, "stream_rate": 100, "away_s": 6.0}
    assert quick.workload is not None and quick.workload.count == 6_000
    assert "catchup" in sc.DEFAULT_SCENARIOS


def _paced(count: int, rate: float, start_ms: float) -> list[Fire]:
    return [Fire(f"b{n}", 50_000, int(start_ms + n * 1000 / rate), False) for n in range(count)]


def test_figures_of_a_paced_drain_and_an_on_time_stream() -> None:
    backlog = _paced(5_000, 500, BACK_MS + 2_000)  # 10 s
    # The stream: due before the restart (overdue, not counted as on time) and after it.
    stream = [Fire(f"s{n}", int(BACK_MS - 5_000 + 100 * n), 0, False) for n in range(100)]
    stream = [
        Fire(f.id, f.deadline_ms, int(BACK_MS) + 2_000, False)
        if f.deadline_ms < BACK_MS
        else Fire(f.id, f.deadline_ms, f.deadline_ms + (n % 10) * 3, False)
        for n, f in enumerate(stream)
    ]
    duplicate = Fire("b7", 50_000, int(BACK_MS) + 9_000, False)
    result = figures(
        500,
        6.0,
        BACK_MS - 5_000,  # started
        BACK_MS,  # ready
        [f"b{n}" for n in range(5_001)],  # b5000 never arrives: lost
        [*backlog, duplicate, Fire("b4999", 50_000, int(BACK_MS) + 9_999, True)],
        [f"s{n}" for n in range(100)],
        stream,
    )
    assert (result.backlog_sent, result.backlog_fired, result.backlog_lost) == (5_001, 5_000, 1)
    assert result.duplicates == 1 and result.backlog_dead_lettered == 0  # b4999 fired too
    assert result.fired_before_restart == 0
    assert result.backlog_rate_per_s == pytest.approx(500, rel=0.01)
    assert result.busiest_window_per_s == pytest.approx(500, rel=0.01)
    on_time = [f for f in stream if f.deadline_ms > BACK_MS + 1_000]
    assert result.stream_measured == len(on_time) == 39
    assert result.stream_during_drain == 39  # the backlog drains until BACK_MS + 12 s
    assert result.stream_p99_ms == 27.0 and result.stream_lost == 0
    assert CatchupFigures.from_dict(result.as_dict()) == result


def test_a_burst_shows_in_the_busiest_window_and_early_fires_are_counted() -> None:
    fired = [0] * 4_000 + list(range(1_000, 21_000, 10))
    assert busiest_window(fired) == pytest.approx((4_000 + 400) / 5)
    early = figures(500, 6.0, BACK_MS, BACK_MS, ["x"], [Fire("x", 1, 5, False)], [], [])
    assert early.fired_before_restart == 1 and early.drain_s is None


def _bench(catchup: dict[str, Any]) -> dict[str, Any]:
    (scenario,) = [r for r in sc.plan(["catchup"], quick=True) if r.kind == "catchup"]
    return {
        "command": "python -m loadtest bench --quick --scenarios catchup",
        "quick": True,
        "machine": {"cores": 2},
        "scenarios": [{**scenario.as_dict(), "status": "ok", "catchup": catchup}],
    }


@pytest.mark.parametrize(
    ("change", "passes"),
    [({}, True), ({"backlog_rate_per_s": 560.0}, False), ({"stream_p99_ms": 240.0}, False),
     ({"stream_lost": 1}, False), ({"fired_before_restart": 3}, False)],
)  # fmt: skip
def test_the_verdict_in_the_outputs(tmp_path: Path, change: dict[str, Any], passes: bool) -> None:
    good = figures(
        500, 6.0, BACK_MS, BACK_MS,
        [f"b{n}" for n in range(2_000)], _paced(2_000, 500, BACK_MS + 2_000), ["s"],
        [Fire("s", int(BACK_MS) + 3_000, int(BACK_MS) + 3_040, False)],
    ).as_dict()  # fmt: skip
    driver.write_outputs(tmp_path, _bench({**good, **change}))
    saved = json.loads((tmp_path / "bench.json").read_text())
    (row,) = [r for r in saved["targets"] if r["scenario"] == "catchup"]
    assert row["pass"] is passes, row
    assert "backlog fires at 500 msg/s ±10%" in row["target"]
    md = (tmp_path / "BENCHMARK.md").read_text()
    assert "| catchup | backlog fires at 500 msg/s" in md
