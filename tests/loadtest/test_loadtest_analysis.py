"""Every metric of the analysis against hand-computed values on a ten-message run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadtest.analysis.summary import analyze_dir
from loadtest.harness.events import RECEIVED_SCHEMA, SENT_SCHEMA

BASE = 1_000_000  # run start (epoch ms)
OUT, DL = "chronos-output", "chronos-dead-letter"

# Lateness (publish - deadline) of the first output copy of a0..a7; a8 is lost, a9 dead-lettered.
LATENESS = [0, 10, -60, 20, 30, 40, -10, 1000]


def _write_run(path: Path) -> None:
    path.mkdir()
    sent: list[dict[str, Any]] = []
    for i in range(10):
        sent_ms = BASE + i * 100
        sent.append(
            {
                "id": f"a{i}",
                "key": f"key-{i % 3}",
                "deadline_ms": sent_ms + 2000,
                "sent_ms": sent_ms,
                "payload_bytes": 100,
                "slot_ms": sent_ms - (15 if i == 3 else 0),  # a3 was sent 15 ms behind schedule
            }
        )
    received: list[dict[str, Any]] = []
    offset = 0

    def rec(mid: str, deadline: int, publish: int, receive: int, dead: bool = False) -> None:
        nonlocal offset
        received.append(
            {
                "id": mid,
                "topic": DL if dead else OUT,
                "partition": 0,
                "offset": offset,
                "deadline_ms": deadline,
                "publish_ms": publish,
                "receive_ms": receive,
                "is_dead_letter": dead,
                "dead_letter_reason": "bad deadline" if dead else None,
            }
        )
        offset += 1

    for i, late in enumerate(LATENESS):
        deadline = sent[i]["deadline_ms"]
        publish = deadline + late
        rec(f"a{i}", deadline, publish, publish + (100 if i == 7 else 5))
    # Duplicates: a5 twice more, a7 once more (later copies, later receive times).
    rec("a5", BASE + 2500, BASE + 3100, BASE + 3105)
    rec("a5", BASE + 2500, BASE + 4500, BASE + 4505)
    rec("a7", BASE + 2700, BASE + 3900, BASE + 3905)
    # a9 rejected to the dead-letter topic; zz was never sent (must not affect lateness).
    rec("a9", BASE + 2900, BASE + 910, BASE + 915, dead=True)
    rec("zz", BASE + 4000, BASE + 5000, BASE + 5005)
    pq.write_table(pa.Table.from_pylist(sent, schema=SENT_SCHEMA), path / "sent.parquet")
    pq.write_table(
        pa.Table.from_pylist(received, schema=RECEIVED_SCHEMA), path / "received.parquet"
    )
    run = {"run_id": "hand", "start_ms": BASE, "params": {"timing_advance_ms": 50, "rate": 10.0}}
    (path / "run.json").write_text(json.dumps(run))


@pytest.fixture(scope="module")
def summary(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    results = tmp_path_factory.mktemp("hand") / "run"
    _write_run(results)
    return analyze_dir(spark, results)


def test_counts(summary: dict[str, Any]) -> None:
    c = summary["counts"]
    assert c["sent"] == 10
    assert c["fired_distinct"] == 8  # a0..a7
    assert c["output_records"] == 12  # 8 firsts + 3 extra copies + zz
    assert c["lost"] == 1
    assert c["lost_sample"] == ["a8"]
    assert c["duplicate_ids"] == 2  # a5, a7
    assert c["duplicate_extra_copies"] == 3  # a5 x2, a7 x1
    assert c["dead_lettered"] == 1
    assert c["dead_letter_records"] == 1
    assert c["dead_letter_reasons"] == {"bad deadline": 1}
    assert c["unexpected_ids"] == 1  # zz
    assert c["fired_and_dead_lettered"] == 0


def test_lateness_exact_percentiles(summary: dict[str, Any]) -> None:
    # sorted: -60 -10 0 10 20 30 40 1000; rank = p * (n - 1), linear interpolation
    late = summary["lateness_ms"]
    assert late["count"] == 8
    assert late["min"] == -60
    assert late["max"] == 1000
    assert late["mean"] == pytest.approx(1030 / 8)  # 128.75
    assert late["p50"] == pytest.approx(15.0)  # rank 3.5: 10 + 0.5 * (20 - 10)
    assert late["p90"] == pytest.approx(328.0)  # rank 6.3: 40 + 0.3 * (1000 - 40)
    assert late["p99"] == pytest.approx(932.8)  # rank 6.93
    assert late["p99_9"] == pytest.approx(993.28)  # rank 6.993
    assert "exact" in summary["percentile_method"]


def test_receive_lateness(summary: dict[str, Any]) -> None:
    # first receipt - deadline: lateness + 5, except a7 (+100): -55 -5 5 15 25 35 45 1100
    e2e = summary["receive_lateness_ms"]
    assert e2e["count"] == 8
    assert e2e["min"] == -55
    assert e2e["max"] == 1100
    assert e2e["p50"] == pytest.approx(20.0)
    assert e2e["mean"] == pytest.approx((1030 + 7 * 5 + 100) / 8)


def test_early_and_sla(summary: dict[str, Any]) -> None:
    assert summary["early"] == {
        "timing_advance_ms": 50,
        "early_count": 1,  # a2: -60 < -50
        "before_deadline_count": 2,  # a2, a6
    }
    sla = summary["sla"]
    assert sla["within_limit_fraction"] == pytest.approx(7 / 8)
    assert sla["jitter_ok"] is False
    assert sla["no_loss"] is False


def test_timing_advance_override(spark: Any, tmp_path: Path) -> None:
    results = tmp_path / "run"
    _write_run(results)
    s = analyze_dir(spark, results, tmp_path / "out", timing_advance_ms=5, report=False)
    assert s["early"]["early_count"] == 2  # -60 and -10 are both before deadline - 5 ms
    assert (tmp_path / "out" / "summary.json").exists()
    assert not (tmp_path / "out" / "report.html").exists()


def test_throughput_timeline(summary: dict[str, Any]) -> None:
    rows = {r["second"]: r for r in summary["throughput"]["timeline"]}
    assert sorted(rows) == [0, 1, 2, 3, 4, 5]
    assert rows[0] == {"second": 0, "sent": 10, "due": 0, "fired": 0, "received": 0}
    assert rows[1] == {"second": 1, "sent": 0, "due": 0, "fired": 0, "received": 0}
    assert rows[2] == {"second": 2, "sent": 0, "due": 10, "fired": 7, "received": 7}
    assert rows[3] == {"second": 3, "sent": 0, "due": 0, "fired": 3, "received": 3}
    assert rows[4] == {"second": 4, "sent": 0, "due": 0, "fired": 1, "received": 1}
    assert rows[5] == {"second": 5, "sent": 0, "due": 0, "fired": 1, "received": 1}
    assert summary["throughput"]["fired_peak_per_s"] == 7
    assert summary["throughput"]["base_ms"] == BASE


def test_producer_lag(summary: dict[str, Any]) -> None:
    p = summary["producer"]
    assert p["send_lag_max_ms"] == 15
    assert p["sent_behind_schedule"] == 1
    assert p["send_lag_p99_ms"] == pytest.approx(13.65)  # nine 0s and one 15: rank 8.91


def test_distribution_and_report(summary: dict[str, Any], spark: Any) -> None:
    dist = summary["distributions"]["lateness_ms"]
    assert dist["min"] == -60 and dist["width"] == 1
    assert sum(dist["counts"]) == 8
    assert dist["counts"][0] == 1 and dist["counts"][1060] == 1  # -60 and 1000
    out = Path(summary["analysis"]["results_dir"])
    html = (out / "report.html").read_text()
    for name in ("lateness_cdf.png", "lateness_hist.png", "throughput.png"):
        assert (out / name).stat().st_size > 1000
        assert name in html
    assert "data:image/png;base64," in html
    assert json.loads((out / "summary.json").read_text())["counts"]["lost"] == 1
