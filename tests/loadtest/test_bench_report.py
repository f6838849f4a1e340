"""The benchmark's outputs: ``bench.json`` and ``BENCHMARK.md`` from a run's records, and
``--render`` of an earlier run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loadtest.bench import driver
from loadtest.cli import build_parser

Bench = dict[str, Any]


def test_markdown_and_json_outputs(tmp_path: Path, canned_bench: Bench) -> None:
    data = canned_bench
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


def test_render_rewrites_an_earlier_run(tmp_path: Path, canned_bench: Bench) -> None:
    (tmp_path / "bench.json").write_text(json.dumps(canned_bench))
    args = build_parser().parse_args(["bench", "--render", str(tmp_path)])
    assert driver.main(args) == 0
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["headline"]["targets_failed"] == 0 and saved["targets"]
    assert (tmp_path / "BENCHMARK.md").read_text().startswith("# Chronos benchmark")
