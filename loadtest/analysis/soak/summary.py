"""The soak's analysis: a soak's results directory (``python -m loadtest soak``) into
``summary.json`` (every figure), the verdicts, the plots and ``report.html``.

The directory holds ``events/`` (the load generator's ``sent.parquet``, ``received.parquet``
and ``run.json``), ``samples.jsonl`` (the sampler's) and ``soak.json`` (the run's own record:
the command, the load, the drain). The whole run is analysed as every load is
(``loadtest.analysis.summary.analyze``: lost, early, duplicates, lateness), then per minute
(``figures``) and judged (``verdicts``).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from loadtest.analysis.soak.figures import (
    bucket_s,
    first_copies,
    lateness_per_minute,
    never_fire,
    sample_minutes,
    window_lateness,
)
from loadtest.analysis.soak.followups import claimed_message_ids, not_applied
from loadtest.analysis.soak.samples import SAMPLES_FILE, read_samples
from loadtest.analysis.soak.verdicts import (
    Backlog,
    RunFigures,
    Windows,
    sample_figures,
    verdicts,
)
from loadtest.analysis.summary import analyze, load_run
from loadtest.harness.events import RECEIVED_FILE, SENT_FILE

EVENTS_DIR = "events"
SOAK_FILE = "soak.json"
SUMMARY_FILE = "summary.json"


def analyze_soak(spark: SparkSession, results: Path, out: Path | None = None) -> dict[str, Any]:
    """Analyse the soak in ``results``; write ``summary.json`` and ``report.html`` (with its
    plots) to ``out`` (default: ``results``). Returns the summary."""
    from loadtest.analysis.soak.report import write_report

    started = time.monotonic()
    out = out or results
    events = results / EVENTS_DIR
    for name in (SENT_FILE, RECEIVED_FILE):
        if not (events / name).exists():
            raise RuntimeError(f"{events / name} not found")
    record_path = results / SOAK_FILE
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    run = load_run(events)
    producer = run.get("producer") or {}
    start_ms = int(producer.get("start_ms") or run.get("start_ms") or 0)
    end_ms = int(producer.get("end_ms") or run.get("end_ms") or start_ms)
    w = Windows.of(start_ms, end_ms)
    sent = spark.read.parquet(str(events / SENT_FILE))
    received = spark.read.parquet(str(events / RECEIVED_FILE))
    excused = not_applied(events, claimed_message_ids(results))
    if excused.never_ids:
        # Not applied: a reschedule's own fire is not expected, and the first schedule's fire
        # (of a cancelled or replaced message) is the message's own, not a fire that must never
        # happen; neither is judged.
        sent = sent.where(~F.col("id").isin(excused.fire_ids))
        received = received.where(~F.col("id").isin(excused.fire_ids + excused.never_ids))
    whole = analyze(spark, sent, received, run=run)
    steps = {"whole_run_s": round(time.monotonic() - started, 1)}
    first = first_copies(received).cache()
    expected = first.where(~first["id"].contains("--"))
    bucket = bucket_s((end_ms - start_ms) / 1000)
    per_minute = lateness_per_minute(expected, sent, start_ms, bucket)
    first_w, last_w = window_lateness(expected, w)
    never = never_fire(first)
    first.unpersist()
    minutes = sample_minutes(spark, results / SAMPLES_FILE, start_ms, bucket)
    steps["per_minute_s"] = round(time.monotonic() - started - steps["whole_run_s"], 1)
    samples = read_samples(results / SAMPLES_FILE)
    drain = record.get("drain") or {}
    figures = sample_figures(samples, w, drain.get("rows_left"), Backlog.of(record))
    counts, late = whole["counts"], whole["lateness_ms"]
    figures_run = RunFigures(
        sent=int(counts["sent"]),
        lost=int(counts["lost"]),
        early=int(whole["early"]["early_count"]),
        duplicate_ids=int(counts["duplicate_ids"]),
        p99_9_ms=None if late.get("p99_9") is None else float(late["p99_9"]),
        max_ms=None if late.get("max") is None else float(late["max"]),
        cancelled_fired=never["cancelled_fired"],
        superseded_fired=never["superseded_fired"],
        advance_ms=int(whole["timing_advance_ms"]),
        first=first_w,
        last=last_w,
        not_applied=excused.cancels + excused.reschedules,
    )
    judged = verdicts(figures_run, figures, w)
    summary: dict[str, Any] = {
        "run_id": run.get("run_id"),
        "soak": record.get("load") or {},
        "command": record.get("command"),
        "mix": producer.get("mix"),
        "windows": {
            **w.as_dict(),
            "lateness": {"first": asdict(first_w), "last": asdict(last_w)},
            **figures,
        },
        "never_fire": never,
        "not_applied": excused.as_dict(),
        "verdicts": [v.as_dict() for v in judged],
        "passed": sum(1 for v in judged if v.ok is True),
        "failed": sum(1 for v in judged if v.ok is False),
        "per_minute": {"bucket_s": bucket, "lateness": per_minute, "samples": minutes},
        "drain": drain,
        "run": whole,
        "analysis": {
            "master": spark.sparkContext.master,
            "results_dir": str(results),
            "steps_s": steps,
        },
    }
    out.mkdir(parents=True, exist_ok=True)
    write_report(summary, out)
    summary["analysis"]["elapsed_s"] = round(time.monotonic() - started, 1)
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary
