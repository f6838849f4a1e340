"""The soak's Spark analysis on a canned soak (``soak_canned``): the whole run's counts, the
fires that must never happen, lateness per minute and in the windows, the samples per minute,
the verdicts, summary.json and the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadtest.analysis.soak.report import PLOTS
from loadtest.analysis.soak.summary import analyze_soak
from tests.loadtest.soak_canned import MESSAGES, write_soak


@pytest.fixture(scope="module")
def soak(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    results = tmp_path_factory.mktemp("soak") / "run"
    write_soak(results)
    return results, analyze_soak(spark, results)


def test_whole_run(soak: tuple[Path, dict[str, Any]]) -> None:
    _, summary = soak
    counts = summary["run"]["counts"]
    assert counts["sent"] == MESSAGES and counts["lost"] == 1 and counts["duplicate_ids"] == 1
    assert counts["unexpected_ids"] == 3  # the fires of ids that must never fire
    assert summary["never_fire"] == {"cancelled_fired": 2, "superseded_fired": 1}
    # r-6000 (a reschedule that reached its claimed message) is neither sent nor lost here
    assert summary["not_applied"] == {"cancels": 1, "reschedules": 1}
    assert summary["run"]["lateness_ms"]["p99_9"] == 40
    assert summary["mix"] == {"records": MESSAGES, "cancelled": 2, "rescheduled": 1}


def test_windows_and_minutes(soak: tuple[Path, dict[str, Any]]) -> None:
    _, summary = soak
    w = summary["windows"]
    assert w["seconds"] == 120 and "fifth" in w["basis"]
    # due in the first window: messages 0..1149 (one lost), six of them 40 ms late
    assert w["lateness"]["first"] == {"count": 1149, "p99_ms": 5.0, "p99_9_ms": 40.0}
    assert w["lateness"]["last"] == {"count": 1200, "p99_ms": 9.0, "p99_9_ms": 40.0}
    late = summary["per_minute"]["lateness"]
    assert [r["minute"] for r in late] == list(range(11))
    assert late[0] == {"minute": 0, "fired": 549, "p50_ms": 5, "p99_ms": 5, "p99_9_ms": 40,
                       "max_ms": 40, "planned": 600}  # fmt: skip
    assert late[10]["planned"] == 0 and late[10]["fired"] == 50
    minutes = summary["per_minute"]["samples"]
    assert [r["minute"] for r in minutes] == list(range(12))  # the final sample left out
    for row in minutes:
        assert row["cores_0"] == pytest.approx(0.5) and row["cores_1"] == pytest.approx(0.5)
        assert row["postgres_cores"] == pytest.approx(0.25)
        assert row["broker_cores"] == pytest.approx(0.1)
        assert row["load_generator_cores"] == pytest.approx(0.2)
        assert row["machine_cores"] == pytest.approx(1.8)
        assert row["pss_mb_0"] == 100
        assert row["wal_per_row_change"] == pytest.approx(300.0, abs=1)
    # an autovacuum every 120 s: in minutes 2, 4, 6, ...
    assert [r["autovacuum_runs"] for r in minutes] == [0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0]
    assert minutes[3]["total_mb"] == pytest.approx(0.02)


def test_verdicts_and_files(soak: tuple[Path, dict[str, Any]]) -> None:
    results, summary = soak
    marks = {v["name"]: v["mark"] for v in summary["verdicts"]}
    assert marks == {
        "lost": "FAIL", "early": "PASS", "actions": "FAIL", "p99.9": "PASS", "drift": "PASS",
        "memory": "PASS", "table": "PASS", "drained": "PASS", "wal": "PASS",
    }  # fmt: skip
    assert (summary["passed"], summary["failed"]) == (7, 2)
    actions = next(v for v in summary["verdicts"] if v["name"] == "actions")
    assert "2 cancelled, 1 replaced fired (2 reached a claimed message" in actions["value"]
    written = json.loads((results / "summary.json").read_text())
    assert written["verdicts"] == summary["verdicts"]
    assert written["analysis"]["elapsed_s"] > 0
    page = (results / "report.html").read_text()
    for name in PLOTS:
        assert (results / name).stat().st_size > 1000, name
        assert name in page
    assert "FAIL" in page and "PASS" in page and "python -m loadtest soak" in page
