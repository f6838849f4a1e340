"""``python -m loadtest bench`` end to end with tiny numbers: its own stack, the ceiling, the
broker's warm-up, one precision run and the report (``--quick --scenarios ceiling,precision``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.services import unavailable

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_bench_quick_smoke(tmp_path: Path) -> None:
    """The whole command with tiny numbers: own stack, ceiling, one precision run, report."""
    if shutil.which("java") is None:
        unavailable("the analysis and the embedded Apache Kafka need Java")
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "-m", "loadtest", "bench", "--quick", "--scenarios",
         "ceiling,precision", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads((out / "bench.json").read_text())
    names = [(r["name"], r["status"]) for r in data["scenarios"]]
    assert names == [("ceiling", "ok"), ("precision", "ok"), ("ceiling-end", "ok")], names
    assert data["headline"]["ceiling_msg_per_s"] > 0
    # its Postgres set up as docs/sizing.md recommends (ALTER SYSTEM, then a restart)
    assert data["stack"]["postgres_settings"] == {"shared_buffers": "1GB", "max_wal_size": "8GB"}
    # the broker warmed once before the first scenario that uses it (its JIT), by a load that
    # ran its whole length
    warmup = data["stack"]["broker_warmup"]
    assert warmup["returncode"] == 0, warmup
    assert (
        len(warmup["broker_cores_per_second"]) >= 20 and max(warmup["broker_cores_per_second"]) > 0
    )
    precision = data["scenarios"][1]
    counts = precision["summary"]["counts"]
    assert counts["sent"] == 10_000 and counts["lost"] == 0
    delivery = precision["summary"]["delivery"]
    assert delivery["sent"] == 10_000 and delivery["lost"] == 0
    assert delivery["window_end_ms"] is not None
    assert precision["claim"]["count"] > 0 and precision["claim"]["mean_ms"] > 0
    assert 20 < precision["rss_max_mb"] < 1000
    assert precision["nodes_stats"][0]["exit_code"] == 0
    assert precision["backlog"]["growing"] is not None
    for name in ("report.html", "summary.json", "lateness_cdf.png", "node-0.log", "stack.png"):
        assert (out / "precision" / name).exists(), name
    md = (out / "BENCHMARK.md").read_text()
    assert "| precision | p99 lateness <= 10 ms |" in md and "Quick mode" in md
    assert "(precision/report.html)" in md
    # Nothing is left running.
    for pid in precision["node_pids"]:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_bench_with_shards_counts_every_shards_postgres(tmp_path: Path) -> None:
    """``--shards 2``: two Postgres servers recorded as shards, the nodes on both; nothing lost,
    and Postgres's CPU and statements are both servers' (each enqueues and claims)."""
    if shutil.which("java") is None:
        unavailable("the analysis and the embedded Apache Kafka need Java")
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "-m", "loadtest", "bench", "--quick", "--scenarios", "precision",
         "--shards", "2", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    data = json.loads((out / "bench.json").read_text())
    assert data["stack"]["shards"] == 2
    (precision,) = [r for r in data["scenarios"] if r["name"] == "precision"]
    assert precision["status"] == "ok" and precision["summary"]["counts"]["lost"] == 0
    breakdown = precision["postgres_breakdown"]["statements"]
    statements = {s["statement"]: s["calls"] for s in breakdown}
    assert statements.get("enqueue_batch", 0) > 0 and statements.get("claim_due", 0) > 0
    per = precision["cpu_per_message"]
    assert per["postgres_us"] > 0
    # both servers' idle rate measured before the load (every shard is polled), and taken away
    # from the figure a message: less than the whole, not nothing
    assert precision["cpu"]["postgres_idle_cores"] > 0
    assert 0 < per["postgres_beyond_idle_us"] < per["postgres_us"]
    assert (out / "stack" / "postgres-shard1.log").exists()
