"""The soak's verdicts on canned figures and samples (no Spark): each PASS when it holds, FAIL
when it does not, n/a without its figures."""

from __future__ import annotations

import pytest

from loadtest.analysis.soak.samples import SoakSample
from loadtest.analysis.soak.verdicts import (
    RunFigures,
    Verdict,
    WindowLateness,
    Windows,
    memory_growth,
    sample_figures,
    verdicts,
    wal_per_row,
)
from tests.loadtest.soak_canned import BASE, SEND_S, samples

WINDOWS = Windows.of(BASE, BASE + SEND_S * 1000)


def _run(**changes: object) -> RunFigures:
    values: dict[str, object] = {
        "sent": 6000, "lost": 0, "early": 0, "duplicate_ids": 0, "p99_9_ms": 40.0,
        "max_ms": 40.0, "cancelled_fired": 0, "superseded_fired": 0, "advance_ms": 50,
        "first": WindowLateness(1000, 5.0, 40.0), "last": WindowLateness(1000, 9.0, 40.0),
    }  # fmt: skip
    values.update(changes)
    return RunFigures(**values)  # type: ignore[arg-type]


def _marks(found: list[Verdict]) -> dict[str, str]:
    return {v.name: v.mark for v in found}


def test_windows() -> None:
    assert WINDOWS.seconds == 120 and "fifth" in WINDOWS.basis
    assert WINDOWS.first == (BASE, BASE + 120_000)
    assert WINDOWS.last == (BASE + 480_000, BASE + 600_000)
    hour = Windows.of(BASE, BASE + 3_600_000)
    assert hour.seconds == 600 and "ten minutes" in hour.basis
    assert Windows.of(BASE, BASE + 3_000_000).seconds == 600  # 50 minutes: a fifth is ten


def test_every_verdict_passes_on_a_steady_run() -> None:
    figures = sample_figures(samples(), WINDOWS, rows_left=0)
    assert figures["memory"] == {
        "0": {"first_mb": 100.0, "last_mb": 100.0, "growth": 0.0},
        "1": {"first_mb": 100.0, "last_mb": 100.0, "growth": 0.0},
    }
    assert figures["bytes_per_row"] == {"first": 400.0, "last": 400.0}
    assert figures["wal_per_row_change"] == {"first": 300.0, "last": 300.0}
    assert figures["live_rows"] == {"first": 50, "last": 50, "peak": 50}
    assert figures["drain"]["rows_left"] == 0 and figures["drain"]["peak_total_bytes"] == 20_000
    found = verdicts(_run(), figures, WINDOWS)
    assert [v.name for v in found] == [
        "lost", "early", "actions", "p99.9", "drift", "memory", "table", "drained", "wal",
    ]  # fmt: skip
    assert set(_marks(found).values()) == {"PASS"}, [v for v in found if v.ok is not True]
    drift = next(v for v in found if v.name == "drift")
    assert "(1.07x)" in drift.value  # (9 + 50) / (5 + 50): from deadline - advance


def test_growth_bloat_wal_and_rows_left_fail() -> None:
    sampled = samples(
        pss=lambda t: 100 + 0.05 * t,
        bytes_per_row=lambda t: 400 + t,
        wal_per_change=lambda t: 300 if t < 300 else 600,
        final_rows=5,
    )
    growth = memory_growth(sampled, WINDOWS)
    assert growth[0]["first_mb"] == pytest.approx(104.5)  # mean over 60..120 s
    assert growth[0]["last_mb"] == pytest.approx(127.0)  # mean over 480..600 s
    assert wal_per_row(sampled, *WINDOWS.last) == pytest.approx(600.0)
    found = _marks(verdicts(_run(), sample_figures(sampled, WINDOWS, rows_left=5), WINDOWS))
    assert (found["memory"], found["table"], found["wal"], found["drained"]) == ("FAIL",) * 4
    assert found["lost"] == "PASS"


def test_run_figures_fail() -> None:
    figures = sample_figures(samples(), WINDOWS, rows_left=0)
    found = _marks(
        verdicts(
            _run(lost=1, early=2, superseded_fired=1, p99_9_ms=51.0,
                 last=WindowLateness(1000, 20.0, 40.0)),
            figures,
            WINDOWS,
        )
    )  # fmt: skip
    assert found == {
        "lost": "FAIL", "early": "FAIL", "actions": "FAIL", "p99.9": "FAIL", "drift": "FAIL",
        "memory": "PASS", "table": "PASS", "drained": "PASS", "wal": "PASS",
    }  # fmt: skip


def test_missing_figures_are_not_judged() -> None:
    bare = [SoakSample(t_ms=BASE + t * 1000) for t in range(0, SEND_S, 10)]
    figures = sample_figures(bare, WINDOWS, rows_left=None)
    found = _marks(
        verdicts(_run(p99_9_ms=None, first=WindowLateness(0, None, None)), figures, WINDOWS)
    )
    for name in ("p99.9", "drift", "memory", "table", "drained", "wal"):
        assert found[name] == "n/a", name
    assert Verdict("x", "", "", None).as_dict()["mark"] == "n/a"
