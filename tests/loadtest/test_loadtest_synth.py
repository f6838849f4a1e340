"""The Spark analysis agrees with numpy on synthetic data with known properties."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from loadtest.analysis.summary import analyze_dir
from loadtest.analysis.synth import SynthSpec, write_synthetic
from loadtest.harness.delays import parse_delay


@pytest.mark.parametrize("delay", ["uniform:1s-3s", "burst:5s"])
def test_synthetic_matches_expected(spark: Any, tmp_path: Path, delay: str) -> None:
    spec = SynthSpec(
        count=20_000,
        rate=5_000,
        delay=parse_delay(delay),
        lost_fraction=0.01,
        duplicate_fraction=0.02,
        dead_letter_fraction=0.005,
        early_fraction=0.01,
        tail_fraction=0.01,
        seed=3,
    )
    expected = write_synthetic(spec, tmp_path)
    assert pq.read_metadata(tmp_path / "sent.parquet").num_rows == 20_000
    summary = analyze_dir(spark, tmp_path, report=False)
    for key, value in expected["counts"].items():
        assert summary["counts"][key] == value, key
    assert expected["counts"]["lost"] > 0 and expected["counts"]["duplicate_ids"] > 0
    for section in ("lateness_ms", "receive_lateness_ms"):
        for stat in ("count", "min", "p50", "p90", "p99", "p99_9", "max"):
            assert summary[section][stat] == pytest.approx(expected[section][stat]), stat
        assert summary[section]["mean"] == pytest.approx(expected[section]["mean"], abs=1e-3)
    assert summary["early"]["early_count"] == expected["early"]["early_count"]
    assert summary["early"]["before_deadline_count"] == expected["early"]["before_deadline_count"]
    fired = expected["counts"]["fired_distinct"]
    assert summary["sla"]["within_limit_fraction"] == pytest.approx(
        expected["within_limit"] / fired, abs=1e-6
    )
    assert summary["throughput"]["timeline"] == expected["timeline"]
    assert summary["producer"]["send_lag_max_ms"] == expected["send_lag_max_ms"]
