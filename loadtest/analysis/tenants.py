"""Per-tenant lateness of a multi-tenant load (``loadtest.harness.tenants``), in Spark.

The ``tenants`` section of ``summary.json`` (absent when no sent message has a tenant):

* ``classes``: for ``flood`` (the tenant whose messages are due at one instant) and ``small``
  (the steady tenants): messages sent and fired, lateness p50 / p99 / max (ms, first output
  copy, exact percentiles as in ``loadtest.analysis.summary``);
* ``small_during_flood``: the same for the small tenants' messages due while the flood drains
  (deadline from the flood's deadline to its last fire): the figure fairness is judged by;
* ``small_worst``: the small tenant with the highest p99, and that p99;
* ``flood_drain``: the flood's fired messages over its first to last fire (msg/s);
* ``per_tenant``: fired, p99 and max of every tenant (at most ``MAX_TENANTS``, busiest first);
* ``timeline``: p99 lateness and count per class and second of deadline (since ``base_ms``),
  which the report plots.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from loadtest.harness.tenants import FLOOD, SMALL_PREFIX

MAX_TENANTS = 1000
MAX_TIMELINE_ROWS = 4000


def _ms(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)


def _lateness_columns() -> list[Column]:
    late = F.col("lateness_ms")
    return [
        F.count(late).alias("fired"),
        F.percentile(late, [0.5, 0.99]).alias("pct"),
        F.max(late).alias("max"),
    ]


def _lateness(row: Any) -> dict[str, Any]:
    pct = row["pct"] or [None, None]
    return {
        "fired": int(row["fired"] or 0),
        "p50_ms": _ms(pct[0]),
        "p99_ms": _ms(pct[1]),
        "max_ms": _ms(row["max"]),
    }


def tenant_class() -> Column:
    tenant = F.col("tenant")
    return (
        F.when(tenant == FLOOD, F.lit("flood"))
        .when(tenant.startswith(SMALL_PREFIX), F.lit("small"))
        .otherwise(F.lit("other"))
    )


def tenant_summary(sent: DataFrame, joined: DataFrame, base_ms: int) -> dict[str, Any] | None:
    """The ``tenants`` section, from the sent log and ``loadtest.analysis.summary.join_events``."""
    if "tenant" not in sent.columns:
        return None
    tenants = sent.where(F.col("tenant").isNotNull()).select(
        "id", "tenant", tenant_class().alias("cls")
    )
    sent_by_class = {
        r["cls"]: int(r["n"]) for r in tenants.groupBy("cls").agg(F.count("*").alias("n")).collect()
    }
    if not sent_by_class:
        return None
    fired = (
        joined.where(F.col("was_sent") & (F.col("out_copies") > 0))
        .select("id", "lateness_ms", "publish_ms", "deadline_ms")
        .join(tenants, "id")
        .cache()
    )
    classes: dict[str, Any] = {}
    for row in fired.groupBy("cls").agg(*_lateness_columns()).collect():
        classes[row["cls"]] = {"sent": sent_by_class.get(row["cls"], 0), **_lateness(row)}
    for cls, n in sent_by_class.items():
        classes.setdefault(
            cls, {"sent": n, "fired": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
        )

    flood = (
        fired.where(F.col("cls") == "flood")
        .agg(
            F.count("*").alias("n"),
            F.min("deadline_ms").alias("due"),
            F.min("publish_ms").alias("first"),
            F.max("publish_ms").alias("last"),
        )
        .collect()[0]
    )
    drain: dict[str, Any] | None = None
    during: dict[str, Any] | None = None
    if flood["n"]:
        seconds = max((flood["last"] - flood["first"]) / 1000, 1e-3)
        drain = {
            "count": int(flood["n"]),
            "deadline_ms": int(flood["due"]),
            "first_fired_ms": int(flood["first"]),
            "last_fired_ms": int(flood["last"]),
            "seconds": round(seconds, 3),
            "rate_per_s": round(flood["n"] / seconds, 1),
        }
        in_drain = (
            (F.col("cls") == "small")
            & (F.col("deadline_ms") >= flood["due"])
            & (F.col("deadline_ms") <= flood["last"])
        )
        row = fired.where(in_drain).agg(*_lateness_columns()).collect()[0]
        during = _lateness(row)

    per_tenant = [
        {"tenant": r["tenant"], "class": r["cls"], **_lateness(r)}
        for r in fired.groupBy("tenant", "cls")
        .agg(*_lateness_columns())
        .orderBy(F.desc("fired"), "tenant")
        .limit(MAX_TENANTS)
        .collect()
    ]
    small = [t for t in per_tenant if t["class"] == "small" and t["p99_ms"] is not None]
    worst = max(small, key=lambda t: t["p99_ms"], default=None)
    second = F.floor((F.col("deadline_ms") - F.lit(base_ms)) / 1000).cast("long")
    timeline = [
        {
            "class": r["cls"],
            "second": int(r["second"]),
            "count": int(r["fired"]),
            "p99_ms": _ms((r["pct"] or [None, None])[1]),
        }
        for r in fired.groupBy("cls", second.alias("second"))
        .agg(*_lateness_columns())
        .orderBy("cls", "second")
        .limit(MAX_TIMELINE_ROWS)
        .collect()
    ]
    fired.unpersist()
    return {
        "classes": classes,
        "small_during_flood": during,
        "small_worst": None
        if worst is None
        else {"tenant": worst["tenant"], "p99_ms": worst["p99_ms"]},
        "flood_drain": drain,
        "per_tenant": per_tenant,
        "timeline_base_ms": base_ms,
        "timeline": timeline,
    }
