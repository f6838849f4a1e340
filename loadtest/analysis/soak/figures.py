"""The soak's figures per minute, in Spark: lateness of the messages due in each minute, the
fires of messages that must never fire, and the samples (``samples.jsonl``) per minute.

A *minute* is a bucket of ``bucket_s(...)`` seconds: a minute when the sending lasts ten minutes
or more, ten seconds for a shorter run (so that its plots have points); each row's ``minute`` is
its bucket's start, in minutes since the first send. Only small aggregates reach the driver: a
row per bucket (an hour's run: about 120 of them, the drain included) and a few counts.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from loadtest.analysis.soak.verdicts import WindowLateness, Windows

SHORT_BUCKET_S = 10
PERCENTILES = [0.5, 0.99, 0.999]
COUNTERS = (
    "postgres_cpu_s",
    "broker_cpu_s",
    "load_generator_cpu_s",
    "machine_cpu_s",
    "wal_bytes",
    "autovacuum_count",
    "autoanalyze_count",
    "rows_inserted",
    "rows_updated",
    "rows_deleted",
    "fired_total",
)
"""Cumulative columns of a sample (and every ``cpu_s_<i>``): per minute, their increase."""
MB = 1024 * 1024


def _num(value: Any, digits: int = 3) -> float | int | None:
    if value is None:
        return None
    f = float(value)
    if math.isnan(f):
        return None
    return int(f) if f.is_integer() else round(f, digits)


def bucket_s(sending_s: float) -> int:
    """The seconds of a row: a minute, or ten seconds when the sending lasts under ten
    minutes."""
    return 60 if sending_s >= 600 else SHORT_BUCKET_S


def _bucket(column: str, base_ms: int, bucket: int) -> Column:
    return F.floor((F.col(column) - F.lit(base_ms)) / F.lit(bucket * 1000)).alias("minute")


def _minutes(index: Any, bucket: int) -> float | int:
    """A bucket's start in minutes (whole when the bucket is a minute)."""
    value = int(index) * bucket / 60
    return int(value) if value.is_integer() else round(value, 4)


def first_copies(received: DataFrame) -> DataFrame:
    """One row per id fired on the output topic: its first fire and its deadline."""
    return (
        received.where(~F.col("is_dead_letter"))
        .groupBy("id")
        .agg(F.min("publish_ms").alias("publish_ms"), F.min("deadline_ms").alias("deadline_ms"))
        .withColumn("lateness_ms", F.col("publish_ms") - F.col("deadline_ms"))
    )


def never_fire(first: DataFrame) -> dict[str, int]:
    """Fires of ids that must never fire (``loadtest.harness.mix``: ``<run>--<k>``, odd k a
    cancelled message, even k a schedule a reschedule replaced)."""
    k = F.regexp_extract(F.col("id"), "--([0-9]+)$", 1).cast("long")
    row = (
        first.where(F.col("id").contains("--"))
        .agg(
            F.sum(F.when(k % 2 == 1, 1).otherwise(0)).alias("cancelled"),
            F.sum(F.when(k % 2 == 0, 1).otherwise(0)).alias("superseded"),
        )
        .first()
    )
    return {
        "cancelled_fired": int((row and row["cancelled"]) or 0),
        "superseded_fired": int((row and row["superseded"]) or 0),
    }


def lateness_per_minute(
    expected: DataFrame, sent: DataFrame, base_ms: int, bucket: int = 60
) -> list[dict[str, Any]]:
    """Per minute of deadline since ``base_ms``: fires and lateness p50/p99/p99.9/max; with the
    fires planned per minute of sending (``planned``)."""
    late = F.col("lateness_ms")
    rows = (
        expected.groupBy(_bucket("deadline_ms", base_ms, bucket))
        .agg(
            F.count(late).alias("fired"),
            F.percentile(late, PERCENTILES).alias("pct"),
            F.max(late).alias("max"),
        )
        .collect()
    )
    planned = {
        int(r["minute"]): int(r["count"])
        for r in sent.groupBy(_bucket("sent_ms", base_ms, bucket)).count().collect()
    }
    table: dict[int, dict[str, Any]] = {}
    for r in rows:
        pct = r["pct"] or [None] * len(PERCENTILES)
        table[int(r["minute"])] = {
            "minute": _minutes(r["minute"], bucket),
            "fired": int(r["fired"]),
            "p50_ms": _num(pct[0]),
            "p99_ms": _num(pct[1]),
            "p99_9_ms": _num(pct[2]),
            "max_ms": _num(r["max"]),
        }
    empty = {"fired": 0, "p50_ms": None, "p99_ms": None, "p99_9_ms": None, "max_ms": None}
    minutes = sorted(set(table) | set(planned))
    return [
        {**table.get(m, {"minute": _minutes(m, bucket), **empty}), "planned": planned.get(m, 0)}
        for m in minutes
    ]


def window_lateness(expected: DataFrame, w: Windows) -> tuple[WindowLateness, WindowLateness]:
    """Lateness p99 and p99.9 of the messages due in the first and in the last window."""
    deadline, late = F.col("deadline_ms"), F.col("lateness_ms")
    columns: list[Column] = []
    for name, (lo, hi) in (("first", w.first), ("last", w.last)):
        inside = (deadline >= F.lit(lo)) & (deadline < F.lit(hi))
        columns += [
            F.sum(F.when(inside, 1).otherwise(0)).alias(f"{name}_n"),
            F.percentile(F.when(inside, late), [0.99, 0.999]).alias(f"{name}_pct"),
        ]
    row = expected.agg(*columns).first()
    assert row is not None

    def one(name: str) -> WindowLateness:
        pct = row[f"{name}_pct"] or [None, None]
        p99, p999 = _num(pct[0]), _num(pct[1])
        return WindowLateness(
            int(row[f"{name}_n"] or 0),
            None if p99 is None else float(p99),
            None if p999 is None else float(p999),
        )

    return one("first"), one("last")


def sample_minutes(
    spark: SparkSession, path: Path, base_ms: int, bucket: int = 60
) -> list[dict[str, Any]]:
    """The samples per minute since ``base_ms`` (the final one after the drain left out):
    memory (mean PSS per node, MB), cores per node, Postgres and the broker, table + index and
    index size (MB, the minute's largest), live and dead rows, autovacuum runs, WAL (MB and
    bytes per row change), consumer lag (the largest) and the broker's log size (MB)."""
    if not path.exists() or path.stat().st_size == 0:
        return []
    df = spark.read.json(str(path))
    if "final" in df.columns:
        df = df.where(~F.coalesce(F.col("final"), F.lit(False)))
    cols = set(df.columns)
    counters = [c for c in cols if c in COUNTERS or c.startswith("cpu_s_")]
    means = [c for c in cols if c.startswith("pss_mb_") or c == "load1"]
    peaks = [
        c
        for c in cols
        if c
        in ("total_bytes", "index_bytes", "table_bytes", "live_rows", "dead_rows", "consumer_lag",
            "in_flight", "broker_log_bytes")
    ]  # fmt: skip
    aggs = [F.min("t_ms").alias("t_min"), F.max("t_ms").alias("t_max")]
    aggs += [F.avg(c).alias(c) for c in means] + [F.max(c).alias(c) for c in peaks]
    aggs += [F.min(c).alias(f"{c}__lo") for c in counters]
    aggs += [F.max(c).alias(f"{c}__hi") for c in counters]
    rows = sorted(
        (r.asDict() for r in df.groupBy(_bucket("t_ms", base_ms, bucket)).agg(*aggs).collect()),
        key=lambda r: r["minute"],
    )
    out: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for r in rows:
        t0 = r["t_min"] if previous is None else previous["t_max"]
        seconds = (r["t_max"] - t0) / 1000
        if seconds < 1:  # a first bucket of one sample: no rate
            previous = r
            continue

        def delta(
            c: str, r: dict[str, Any] = r, previous: dict[str, Any] | None = previous
        ) -> float | None:
            hi = r.get(f"{c}__hi")
            lo = r.get(f"{c}__lo") if previous is None else previous.get(f"{c}__hi")
            return None if hi is None or lo is None else float(hi) - float(lo)

        row: dict[str, Any] = {
            "minute": _minutes(r["minute"], bucket),
            "seconds": round(seconds, 1),
        }
        row.update({c: _num(r[c], 1) for c in means})
        for c in counters:
            d = delta(c)
            if c.startswith("cpu_s_") or c.endswith("cpu_s"):
                name = c.replace("cpu_s", "cores")
                row[name] = None if d is None else _num(d / seconds, 3)
        wal, changes = delta("wal_bytes"), None
        parts = [delta(c) for c in ("rows_inserted", "rows_updated", "rows_deleted")]
        if all(p is not None for p in parts):
            changes = sum(p for p in parts if p is not None)
        row["wal_mb"] = None if wal is None else _num(wal / MB, 2)
        row["wal_per_row_change"] = None if wal is None or not changes else _num(wal / changes, 1)
        row["row_changes"] = None if changes is None else int(changes)
        row["autovacuum_runs"] = (
            None if delta("autovacuum_count") is None else int(delta("autovacuum_count") or 0)
        )
        fired = delta("fired_total")
        row["fired_per_s"] = None if fired is None else _num(fired / seconds, 1)
        for c in peaks:
            value = r[c]
            if c.endswith("_bytes"):
                row[c.replace("_bytes", "_mb")] = None if value is None else _num(value / MB, 2)
            else:
                row[c] = _num(value, 1)
        out.append(row)
        previous = r
    return out
