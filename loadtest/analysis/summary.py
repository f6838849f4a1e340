"""Spark analysis of a results directory: counts, lateness percentiles, throughput timeline.

Definitions (all times are epoch milliseconds):

* lateness            ``publish_ms - deadline_ms`` of the *first* output copy of each id
                      (``publish_ms`` is the output record's timestamp, i.e. the fire time);
* receive lateness    ``receive_ms - deadline_ms`` of the first received output copy;
* early               fired before ``deadline - timing advance`` (``lateness < -advance``);
* lost                sent, but seen on neither the output nor the dead-letter topic;
* duplicates          ids with more than one output record (``duplicate_ids``) and the number
                      of records beyond the first (``duplicate_extra_copies``);
* dead-lettered       distinct ids seen on the dead-letter topic;
* delivery            each sent id in one class (``loadtest.analysis.delivery``): on time or late
                      (lateness above the jitter limit) within the recording window, late
                      after the window (first output copy received during the grace that
                      follows it), dead-lettered only, or lost (never received).

Percentiles are exact (Spark ``percentile``: linear interpolation between the two closest ranks,
the same definition as ``numpy.percentile``'s default). Only small aggregates reach the driver.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from loadtest.analysis.delivery import Delivery
from loadtest.analysis.tenants import tenant_summary
from loadtest.harness.events import (
    PRODUCE_ERRORS_FILE,
    RECEIVED_FILE,
    RUN_FILE,
    SENT_FILE,
    DrainWindow,
)

PERCENTILES = (0.5, 0.9, 0.99, 0.999)
PERCENTILE_NAMES = ("p50", "p90", "p99", "p99_9")
MAX_BUCKETS = 2000
LOST_SAMPLE = 20


def _num(value: Any, digits: int = 3) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value
    f = float(value)
    if math.isnan(f):
        return None
    return int(f) if f.is_integer() else round(f, digits)


def _stat_columns(name: str, expr: Column) -> list[Column]:
    return [
        F.count(expr).alias(f"{name}_n"),
        F.min(expr).alias(f"{name}_min"),
        F.max(expr).alias(f"{name}_max"),
        F.avg(expr).alias(f"{name}_mean"),
        F.percentile(expr, list(PERCENTILES)).alias(f"{name}_pct"),
    ]


def _stats(row: dict[str, Any], name: str) -> dict[str, Any]:
    pct = row[f"{name}_pct"] or [None] * len(PERCENTILES)
    out: dict[str, Any] = {
        "count": row[f"{name}_n"],
        "min": _num(row[f"{name}_min"]),
        "mean": _num(row[f"{name}_mean"]),
    }
    out.update({k: _num(v) for k, v in zip(PERCENTILE_NAMES, pct, strict=True)})
    out["max"] = _num(row[f"{name}_max"])
    return out


def per_id(received: DataFrame) -> DataFrame:
    """One row per received id: copies on each topic and the first output copy's times."""
    dead = F.col("is_dead_letter")
    out = ~dead
    return received.groupBy("id").agg(
        F.sum(F.when(out, 1).otherwise(0)).alias("out_copies"),
        F.sum(F.when(dead, 1).otherwise(0)).alias("dl_copies"),
        F.min(F.when(out, F.col("publish_ms"))).alias("publish_ms"),
        F.min(F.when(out, F.col("receive_ms"))).alias("receive_ms"),
        F.min("deadline_ms").alias("r_deadline_ms"),
    )


def join_events(sent: DataFrame, received: DataFrame) -> DataFrame:
    """Sent messages full-outer-joined with the per-id receive summary."""
    s = sent.select(
        "id",
        F.col("deadline_ms").alias("s_deadline_ms"),
        "sent_ms",
        (
            (F.col("sent_ms") - F.col("slot_ms"))
            if "slot_ms" in sent.columns
            else F.lit(None).cast("long")
        ).alias("send_lag_ms"),
        F.lit(True).alias("was_sent"),
    )
    joined = s.join(per_id(received), "id", "full_outer")
    # Lateness is measured against the deadline we sent, so only for ids in the sent log.
    deadline = F.col("s_deadline_ms")
    return joined.select(
        "id",
        F.coalesce(F.col("was_sent"), F.lit(False)).alias("was_sent"),
        F.coalesce(deadline, F.col("r_deadline_ms")).alias("deadline_ms"),
        "sent_ms",
        "send_lag_ms",
        F.coalesce(F.col("out_copies"), F.lit(0)).alias("out_copies"),
        F.coalesce(F.col("dl_copies"), F.lit(0)).alias("dl_copies"),
        "publish_ms",
        "receive_ms",
        (F.col("publish_ms") - deadline).alias("lateness_ms"),
        (F.col("receive_ms") - deadline).alias("receive_lateness_ms"),
    )


def delivery_columns(window_end_ms: int | None, late_limit_ms: int) -> list[Column]:
    """Aggregates over ``join_events`` rows that classify every sent id (see
    ``loadtest.analysis.delivery``); ``window_end_ms`` None (a run that recorded no window) puts
    every received message within the window."""
    was_sent = F.col("was_sent")
    fired = was_sent & (F.col("out_copies") > 0)
    late = F.col("lateness_ms")
    if window_end_ms is None:
        after = F.lit(False)
    else:
        after = fired & (F.col("receive_ms") > F.lit(window_end_ms))
    within = fired & ~after
    is_late = fired & (after | (late > F.lit(late_limit_ms)))

    def count_if(cond: Column) -> Column:
        return F.sum(F.when(cond, 1).otherwise(0))

    def when(cond: Column, value: Column) -> Column:
        return F.when(cond, value)

    window_end = F.lit(window_end_ms if window_end_ms is not None else 0)
    return [
        count_if(within & (late <= F.lit(late_limit_ms))).alias("dl_on_time"),
        count_if(within & (late > F.lit(late_limit_ms))).alias("dl_late_in_window"),
        count_if(after).alias("dl_late_after_window"),
        count_if(was_sent & (F.col("out_copies") == 0) & (F.col("dl_copies") > 0)).alias(
            "dl_dead_lettered"
        ),
        F.max(when(is_late, late)).alias("dl_late_max"),
        F.max(when(after, late)).alias("dl_after_late_max"),
        F.min(when(after, late)).alias("dl_after_late_min"),
        F.max(when(after, F.col("receive_ms") - window_end)).alias("dl_after_max"),
    ]


def delivery_from_row(
    r: dict[str, Any], *, window_end_ms: int | None, late_limit_ms: int, lost: int
) -> Delivery:
    def opt(key: str) -> int | None:
        return None if r[key] is None else int(r[key])

    return Delivery(
        sent=int(r["sent"] or 0),
        on_time=int(r["dl_on_time"] or 0),
        late_in_window=int(r["dl_late_in_window"] or 0),
        late_after_window=int(r["dl_late_after_window"] or 0),
        dead_lettered=int(r["dl_dead_lettered"] or 0),
        lost=lost,
        late_limit_ms=late_limit_ms,
        window_end_ms=window_end_ms,
        late_max_ms=opt("dl_late_max"),
        after_window_lateness_max_ms=opt("dl_after_late_max"),
        after_window_lateness_min_ms=opt("dl_after_late_min"),
        after_window_max_ms=opt("dl_after_max"),
    )


def _distribution(df: DataFrame, column: str, lo: int | None, hi: int | None) -> dict[str, Any]:
    """Dense histogram with at most MAX_BUCKETS buckets of equal integer width."""
    if lo is None or hi is None:
        return {"min": None, "width": 1, "counts": []}
    width = max(1, math.ceil((hi - lo + 1) / MAX_BUCKETS))
    rows = (
        df.where(F.col(column).isNotNull())
        .groupBy(F.floor((F.col(column) - F.lit(lo)) / F.lit(width)).alias("b"))
        .count()
        .collect()
    )
    counts = [0] * (int((hi - lo) // width) + 1)
    for row in rows:
        counts[int(row["b"])] += int(row["count"])
    return {"min": lo, "width": width, "counts": counts}


def _timeline(sent: DataFrame, received: DataFrame, base_ms: int) -> list[dict[str, int]]:
    """Messages per second since ``base_ms``: sent, due, fired (output records), received."""

    def sec(col: str) -> Column:
        return F.floor((F.col(col) - F.lit(base_ms)) / F.lit(1000)).alias("second")

    out = received.where(~F.col("is_dead_letter"))
    events = (
        sent.select(F.lit("sent").alias("kind"), sec("sent_ms"))
        .unionByName(sent.select(F.lit("due").alias("kind"), sec("deadline_ms")))
        .unionByName(out.select(F.lit("fired").alias("kind"), sec("publish_ms")))
        .unionByName(out.select(F.lit("received").alias("kind"), sec("receive_ms")))
    )
    rows = events.groupBy("second", "kind").count().collect()
    table: dict[int, dict[str, int]] = {}
    for row in rows:
        second = int(row["second"])
        table.setdefault(second, {"second": second, "sent": 0, "due": 0, "fired": 0, "received": 0})
        table[second][row["kind"]] = int(row["count"])
    if not table:
        return []
    lo, hi = min(table), max(table)
    empty = {"sent": 0, "due": 0, "fired": 0, "received": 0}
    return [table.get(s, {"second": s, **empty}) for s in range(lo, hi + 1)]


def analyze(
    spark: SparkSession,
    sent: DataFrame,
    received: DataFrame,
    *,
    run: dict[str, Any] | None = None,
    timing_advance_ms: int | None = None,
    jitter_limit_ms: int = 500,
    produce_errors: DataFrame | None = None,
) -> dict[str, Any]:
    """Compute the summary dictionary (see the module docstring for the definitions)."""
    started = time.monotonic()
    run = run or {}
    params = run.get("params", {})
    advance = (
        timing_advance_ms if timing_advance_ms is not None else params.get("timing_advance_ms")
    )
    advance = 50 if advance is None else int(advance)

    steps: dict[str, float] = {}
    mark = [time.monotonic()]

    def step(name: str) -> None:
        now = time.monotonic()
        steps[name] = round(now - mark[0], 2)
        mark[0] = now

    window = DrainWindow.from_dict(run.get("drain"))
    window_end_ms = None if window is None else window.window_end_ms
    joined = join_events(sent, received).cache()
    late = F.col("lateness_ms")
    was_sent = F.col("was_sent")
    fired = was_sent & (F.col("out_copies") > 0)
    dead = was_sent & (F.col("dl_copies") > 0)
    duplicated = was_sent & (F.col("out_copies") > 1)
    lost = was_sent & (F.col("out_copies") == 0) & (F.col("dl_copies") == 0)
    lag = F.col("send_lag_ms")
    behind_ms = float(params.get("behind_threshold_ms", 10.0))

    def count_if(cond: Column) -> Column:
        return F.sum(F.when(cond, 1).otherwise(0))

    row = joined.agg(
        F.sum(was_sent.cast("long")).alias("sent"),
        count_if(fired).alias("fired_distinct"),
        F.sum("out_copies").alias("output_records"),
        F.sum("dl_copies").alias("dead_letter_records"),
        count_if(dead).alias("dead_lettered"),
        count_if(lost).alias("lost"),
        count_if(~was_sent).alias("unexpected_ids"),
        count_if(duplicated).alias("duplicate_ids"),
        F.sum(F.when(duplicated, F.col("out_copies") - 1).otherwise(0)).alias(
            "duplicate_extra_copies"
        ),
        count_if(fired & dead).alias("fired_and_dead_lettered"),
        count_if(late < -advance).alias("early"),
        count_if(late < 0).alias("before_deadline"),
        count_if(F.abs(late) <= jitter_limit_ms).alias("within_limit"),
        F.min("sent_ms").alias("first_sent_ms"),
        F.max("sent_ms").alias("last_sent_ms"),
        F.min("publish_ms").alias("first_fired_ms"),
        F.max("publish_ms").alias("last_fired_ms"),
        F.min("deadline_ms").alias("first_deadline_ms"),
        F.max("deadline_ms").alias("last_deadline_ms"),
        *_stat_columns("late", late),
        *_stat_columns("e2e", F.col("receive_lateness_ms")),
        F.max(lag).alias("lag_max"),
        F.percentile(lag, [0.99]).alias("lag_p99"),
        F.sum(F.when(lag > behind_ms, 1).otherwise(0)).alias("lag_behind"),
        *delivery_columns(window_end_ms, jitter_limit_ms),
    ).first()
    assert row is not None
    r = row.asDict()
    counts: dict[str, Any] = {
        k: int(r[k] or 0)
        for k in (
            "sent",
            "output_records",
            "fired_distinct",
            "dead_letter_records",
            "dead_lettered",
            "lost",
            "duplicate_ids",
            "duplicate_extra_copies",
            "unexpected_ids",
            "fired_and_dead_lettered",
        )
    }
    lost_sample: list[str] = []
    if counts["lost"]:
        lost_rows = joined.where(lost).select("id").orderBy("id").limit(LOST_SAMPLE).collect()
        lost_sample = [x["id"] for x in lost_rows]
    delivery = delivery_from_row(
        r, window_end_ms=window_end_ms, late_limit_ms=jitter_limit_ms, lost=counts["lost"]
    )
    if delivery.late_after_window and window_end_ms is not None:
        after = was_sent & (F.col("out_copies") > 0) & (F.col("receive_ms") > window_end_ms)
        rows = joined.where(after).select("id").orderBy("id").limit(LOST_SAMPLE).collect()
        delivery = replace(delivery, after_window_sample=[x["id"] for x in rows])
    step("join_and_aggregate")
    counts["lost_sample"] = lost_sample
    if counts["dead_letter_records"]:
        reasons = (
            received.where(F.col("is_dead_letter"))
            .groupBy(F.coalesce(F.col("dead_letter_reason"), F.lit("")).alias("reason"))
            .count()
            .orderBy(F.desc("count"))
            .limit(20)
            .collect()
        )
        counts["dead_letter_reasons"] = {x["reason"]: int(x["count"]) for x in reasons}
    if produce_errors is not None:
        counts["produce_errors"] = produce_errors.count()

    lateness = _stats(r, "late")
    receive_lateness = _stats(r, "e2e")
    n_fired = counts["fired_distinct"]
    distributions = {
        "lateness_ms": _distribution(joined, "lateness_ms", r["late_min"], r["late_max"]),
        "receive_lateness_ms": _distribution(
            joined, "receive_lateness_ms", r["e2e_min"], r["e2e_max"]
        ),
    }
    base_ms = run.get("start_ms") or r["first_sent_ms"] or r["first_fired_ms"] or 0
    tenants = tenant_summary(sent, joined, int(base_ms))
    joined.unpersist()
    step("distributions")

    timeline = _timeline(sent, received, int(base_ms))
    step("timeline")
    fired_rates = [row["fired"] for row in timeline if row["fired"]]
    fired_span_s = max((r["last_fired_ms"] - r["first_fired_ms"]) / 1000, 1e-3) if n_fired else None
    sent_span_s = (
        max((r["last_sent_ms"] - r["first_sent_ms"]) / 1000, 1e-3) if counts["sent"] else None
    )
    throughput = {
        "base_ms": int(base_ms),
        "sent_mean_per_s": _num(counts["sent"] / sent_span_s) if sent_span_s else None,
        "fired_mean_per_s": _num(counts["output_records"] / fired_span_s) if fired_span_s else None,
        "fired_peak_per_s": max(fired_rates) if fired_rates else 0,
        "timeline": timeline,
    }
    within = r["within_limit"] or 0
    within_fraction = within / n_fired if n_fired else None
    offered = params.get("rate")
    sla = {
        "jitter_limit_ms": jitter_limit_ms,
        "jitter_target_fraction": 0.999,
        "within_limit_fraction": _num(within_fraction, 6),
        "jitter_ok": None if within_fraction is None else within_fraction >= 0.999,
        "throughput_target_per_s": 1000,
        "offered_rate_per_s": offered,
        "no_loss": counts["lost"] == 0,
    }
    summary: dict[str, Any] = {
        "run_id": run.get("run_id"),
        "params": params,
        "timing_advance_ms": advance,
        "counts": counts,
        "delivery": delivery.as_dict(),
        "lateness_ms": {"basis": "publish_ms - deadline_ms, first output copy", **lateness},
        "receive_lateness_ms": {
            "basis": "receive_ms - deadline_ms, first copy",
            **receive_lateness,
        },
        "percentile_method": "exact (Spark percentile, linear interpolation; numpy default)",
        "early": {
            "timing_advance_ms": advance,
            "early_count": int(r["early"] or 0),
            "before_deadline_count": int(r["before_deadline"] or 0),
        },
        "sla": sla,
        "producer": {
            "send_lag_max_ms": _num(r["lag_max"]),
            "send_lag_p99_ms": _num((r["lag_p99"] or [None])[0]),
            "sent_behind_schedule": int(r["lag_behind"] or 0),
            "behind_threshold_ms": behind_ms,
        },
        "window": {
            "first_sent_ms": r["first_sent_ms"],
            "last_sent_ms": r["last_sent_ms"],
            "first_deadline_ms": r["first_deadline_ms"],
            "last_deadline_ms": r["last_deadline_ms"],
            "first_fired_ms": r["first_fired_ms"],
            "last_fired_ms": r["last_fired_ms"],
        },
        "throughput": throughput,
        "distributions": distributions,
        **({"tenants": tenants} if tenants is not None else {}),
        "analysis": {"elapsed_s": round(time.monotonic() - started, 2), "steps_s": steps},
    }
    return summary


def load_run(results: Path) -> dict[str, Any]:
    path = results / RUN_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def analyze_dir(
    spark: SparkSession,
    results: Path,
    out: Path | None = None,
    *,
    timing_advance_ms: int | None = None,
    jitter_limit_ms: int = 500,
    report: bool = True,
) -> dict[str, Any]:
    """Analyse ``results``; write ``summary.json`` and ``report.html`` (with plots) to ``out``."""
    from loadtest.analysis.report import write_report

    started = time.monotonic()
    out = out or results
    for name in (SENT_FILE, RECEIVED_FILE):
        if not (results / name).exists():
            raise RuntimeError(f"{results / name} not found")
    sent = spark.read.parquet(str(results / SENT_FILE))
    received = spark.read.parquet(str(results / RECEIVED_FILE))
    errors_path = results / PRODUCE_ERRORS_FILE
    errors = spark.read.parquet(str(errors_path)) if errors_path.exists() else None
    summary = analyze(
        spark,
        sent,
        received,
        run=load_run(results),
        timing_advance_ms=timing_advance_ms,
        jitter_limit_ms=jitter_limit_ms,
        produce_errors=errors,
    )
    summary["analysis"]["master"] = spark.sparkContext.master
    summary["analysis"]["results_dir"] = str(results)
    out.mkdir(parents=True, exist_ok=True)
    if report:
        write_report(summary, out)
    summary["analysis"]["elapsed_s"] = round(time.monotonic() - started, 2)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
