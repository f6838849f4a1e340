"""``run`` end to end against a real Kafka-protocol broker, with the echo relay as Chronos."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from loadtest.analysis import analyze_dir
from loadtest.relay import EchoRelay
from loadtest.topics import ensure_topics

REPO = Path(__file__).resolve().parents[2]
TOPICS = ["chronos-input", "chronos-output", "chronos-dead-letter"]


def _run(bootstrap: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "loadtest", "run", "--bootstrap", bootstrap, "--out", str(out)]
    return subprocess.run(
        [*argv, "--no-progress", "--seed", "1", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.integration
def test_run_with_echo_relay(lt_broker: str, spark: Any, tmp_path: Path) -> None:
    ensure_topics(lt_broker, TOPICS, create_partitions=3)
    relay = EchoRelay(
        bootstrap=lt_broker,
        input_topic=TOPICS[0],
        output_topic=TOPICS[1],
        dead_letter_topic=TOPICS[2],
        start_from="beginning",
    )
    try:
        relay.prepare()
        relay.start()
        first = tmp_path / "first"
        proc = _run(
            lt_broker,
            first,
            *("--rate", "200", "--duration", "2s", "--delay", "fixed:1s"),
            *("--drain-timeout", "15s", "--keys", "7", "--payload-bytes", "64"),
        )
        assert proc.returncode == 0, proc.stderr
        # A second run on the same topics: the first run's records must be ignored, and every
        # fifth record is rejected by the relay to exercise the dead-letter path.
        relay.dead_letter_every = 5
        second = tmp_path / "second"
        proc2 = _run(
            lt_broker,
            second,
            *("--rate", "200", "--count", "100", "--delay", "uniform:200ms-800ms"),
            *("--drain-timeout", "15s", "--keys", "null"),
        )
        assert proc2.returncode == 0, proc2.stderr
    finally:
        relay.stop()
    assert relay.error is None

    # First run: files, counts and lateness.
    for name in ("sent.parquet", "received.parquet", "run.json"):
        assert (first / name).exists()
    run = json.loads((first / "run.json").read_text())
    assert run["complete"] is True
    assert run["params"]["delay"] == "fixed:1s"
    assert run["producer"]["sent"] == 400
    assert run["producer"]["produce_errors"] == 0
    sent = pq.read_table(first / "sent.parquet")
    assert sent.num_rows == 400
    assert set(sent.column("key").to_pylist()) == {f"key-{i}" for i in range(7)}
    assert set(sent.column("payload_bytes").to_pylist()) == {64}
    summary = analyze_dir(spark, first)
    c = summary["counts"]
    assert c["sent"] == 400 and c["fired_distinct"] == 400
    assert c["lost"] == 0
    assert c["duplicate_ids"] == 0 and c["duplicate_extra_copies"] == 0
    assert c["dead_lettered"] == 0 and c["unexpected_ids"] == 0
    late = summary["lateness_ms"]
    # The relay fires at deadline - 50 ms, give or take its polling and the machine's noise.
    assert -50 <= late["min"] and late["p50"] < 200 and late["max"] < 2000
    assert summary["early"]["early_count"] == 0
    assert summary["receive_lateness_ms"]["p50"] >= late["p50"]
    busy = [r for r in summary["throughput"]["timeline"] if r["sent"]]
    assert sum(r["sent"] for r in busy) == 400 and len(busy) in (2, 3)
    assert (first / "report.html").exists()

    # Second run: null keys, dead letters recorded, nothing from the first run.
    run2 = json.loads((second / "run.json").read_text())
    assert run2["complete"] is True
    assert pq.read_table(second / "sent.parquet").column("key").null_count == 100
    received = pq.read_table(second / "received.parquet").to_pylist()
    assert all(r["id"].startswith(run2["run_id"]) for r in received)
    dead = [r for r in received if r["is_dead_letter"]]
    assert len(dead) == 20 and len(received) == 100
    assert {r["dead_letter_reason"] for r in dead} == {"rejected by the echo relay (test hook)"}
    s2 = analyze_dir(spark, second, report=False)
    assert s2["counts"]["lost"] == 0 and s2["counts"]["dead_lettered"] == 20
    assert s2["counts"]["fired_distinct"] == 80
