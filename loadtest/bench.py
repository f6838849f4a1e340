"""``python -m loadtest bench``: the headline benchmark, reproduced by one command.

It brings up its own stack with the project's code — ``EmbeddedPostgres`` (durable, as
``chronos dev`` runs it) and ``EmbeddedBroker`` on free ports in a fresh data directory — runs
the migrations, measures the raw-SQL ceiling (``loadtest.ceiling``) on that Postgres, and then
runs each scenario (``loadtest.scenarios``) on fresh topics, an empty table (or one pre-loaded
with far-future rows) and freshly started ``python -m chronos run`` node processes:

* the load generator runs in a separate process (``python -m loadtest run``), then the Spark
  analysis (``python -m loadtest analyze``) writes the scenario's ``summary.json``,
  ``report.html`` and plots;
* every second a sampler records each node's RSS (``/proc/<pid>/status``) and the table (rows
  waiting, claimed and overdue, from the partial indexes, never a scan of pre-loaded rows), and
  scrapes each node's ``/metrics`` (consumer lag, in-flight messages);
* around the load it records each node's CPU time and ``/metrics`` (the ``claim`` statement
  latency histogram: mean from the sum/count delta, p99 from the bucket deltas), the CPU time of
  Postgres, the broker, the load generator and the rest of the machine;
* a node that fires nothing for 10 s while rows are overdue gets its thread stacks and the
  database sessions saved (``stall-node<i>.txt``); ``--profile`` records a node with py-spy.

The ``relay`` scenario runs the same load with the harness's echo relay in place of Chronos: the
lateness the load generator and the broker impose on their own, measured in the same run.

Everything is stopped at the end (nodes by SIGTERM, then the broker and Postgres), also on
Ctrl-C or an error. ``<out>/bench.json`` holds every figure, ``<out>/BENCHMARK.md`` the headline
table, the ratio of Chronos's sustained throughput to the ceiling, the command line and the
machine facts, with links to each scenario's report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from loadtest import scenarios as sc
from loadtest.delivery import Delivery, delivery_rows, late_text, locate_loss
from loadtest.scenarios import Scenario, Workload

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS = Path("loadtest/results")
SAMPLE_INTERVAL_S = 1.0
READY_TIMEOUT_S = 90.0
SESSION_TIMEOUT_MS = "6000"
TOP_FUNCTIONS = 30
MB = 1024 * 1024

# ============================================================================ pure helpers
# Everything in this section works on text and dictionaries only, so it is unit-tested.

_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?$")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_prometheus(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition (comments and bad lines skipped)."""
    out: list[Sample] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE_RE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = {
            k: v.replace('\\"', '"').replace("\\\\", "\\")
            for k, v in _LABEL_RE.findall(m.group(2) or "")
        }
        out.append(Sample(m.group(1), labels, value))
    return out


def _matches(sample: Sample, labels: dict[str, str]) -> bool:
    return all(sample.labels.get(k) == v for k, v in labels.items())


def metric_total(samples: Iterable[Sample], name: str, **labels: str) -> float | None:
    """Sum of every sample ``name`` whose labels include ``labels`` (None if there is none)."""
    values = [s.value for s in samples if s.name == name and _matches(s, labels)]
    return sum(values) if values else None


@dataclass
class Histogram:
    """A cumulative Prometheus histogram: ``bounds`` ascending (the last is +Inf)."""

    bounds: list[float]
    cumulative: list[float]
    sum: float | None  # None when not exposed (prometheus_client drops it for negative buckets)
    count: float

    def minus(self, earlier: Histogram | None) -> Histogram:
        """The observations made since ``earlier`` (a scrape of the same series)."""
        if earlier is None:
            return self
        before = dict(zip(earlier.bounds, earlier.cumulative, strict=True))
        return Histogram(
            list(self.bounds),
            [c - before.get(b, 0.0) for b, c in zip(self.bounds, self.cumulative, strict=True)],
            None if self.sum is None or earlier.sum is None else self.sum - earlier.sum,
            self.count - earlier.count,
        )

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 and self.sum is not None else None

    def quantile(self, q: float) -> float | None:
        """``histogram_quantile``: linear interpolation inside the bucket holding rank q x n;
        in the +Inf bucket, the largest finite bound."""
        if self.count <= 0 or not self.bounds:
            return None
        rank = q * self.count
        lower: float | None = None
        below = 0.0
        for bound, cum in zip(self.bounds, self.cumulative, strict=True):
            if cum >= rank:
                if math.isinf(bound):
                    finite = [b for b in self.bounds if not math.isinf(b)]
                    return finite[-1] if finite else None
                if lower is None:  # the first bucket starts at 0, or is a point when <= 0
                    if bound <= 0:
                        return bound
                    lower = 0.0
                in_bucket = cum - below
                if in_bucket <= 0:
                    return bound
                return lower + (bound - lower) * (rank - below) / in_bucket
            lower, below = bound, cum
        return None


def histogram(samples: Iterable[Sample], name: str, **labels: str) -> Histogram | None:
    """The histogram ``name`` restricted to ``labels``, summed over every matching series (for
    example over several nodes' scrapes)."""
    buckets: dict[float, float] = {}
    total: float | None = None
    count = 0.0
    found = False
    for s in samples:
        if not _matches(s, labels):
            continue
        if s.name == f"{name}_bucket" and "le" in s.labels:
            bound = float(s.labels["le"])
            buckets[bound] = buckets.get(bound, 0.0) + s.value
            found = True
        elif s.name == f"{name}_sum":
            total = (total or 0.0) + s.value
        elif s.name == f"{name}_count":
            count += s.value
    if not found:
        return None
    bounds = sorted(buckets)
    return Histogram(bounds, [buckets[b] for b in bounds], total, count)


def histogram_summary(
    after: Histogram | None, before: Histogram | None, seconds: float | None = None
) -> dict[str, Any]:
    """count, mean/p50/p99/max-bucket in milliseconds of the observations between two scrapes."""
    if after is None:
        return {"count": 0, "mean_ms": None, "p50_ms": None, "p99_ms": None}
    h = after.minus(before)
    out: dict[str, Any] = {
        "count": int(round(h.count)),
        "mean_ms": _ms(h.mean),
        "p50_ms": _ms(h.quantile(0.5)),
        "p99_ms": _ms(h.quantile(0.99)),
        "p99_9_ms": _ms(h.quantile(0.999)),
    }
    if seconds:
        out["per_s"] = round(h.count / seconds, 2)
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def parse_status_kb(status_text: str, field_name: str = "VmRSS") -> int | None:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``)."""
    for line in status_text.splitlines():
        if line.startswith(field_name + ":"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1])
    return None


@dataclass(frozen=True)
class ProcStat:
    ppid: int
    ticks: int  # utime + stime
    child_ticks: int  # cutime + cstime (reaped children)


def parse_proc_stat(stat_text: str) -> ProcStat:
    """``/proc/<pid>/stat``: the command may contain spaces and parentheses, so split after the
    last ')'; fields 4 (ppid), 14-17 (utime, stime, cutime, cstime)."""
    fields = stat_text.rpartition(")")[2].split()
    return ProcStat(
        ppid=int(fields[1]),
        ticks=int(fields[11]) + int(fields[12]),
        child_ticks=int(fields[13]) + int(fields[14]),
    )


def parse_machine_cpu(proc_stat_text: str) -> tuple[int, int]:
    """(busy, total) ticks of all CPUs from the first line of ``/proc/stat``."""
    first = proc_stat_text.splitlines()[0].split()
    values = [int(v) for v in first[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already counted in user
    return total - idle, total


def steady_rates(
    timeline: Sequence[dict[str, int]], window: tuple[int, int] | None
) -> dict[str, Any] | None:
    """Mean sent, due and fired per second over the whole seconds ``lo <= s < hi`` since the
    start of sending (the analysis timeline)."""
    if not window:
        return None
    lo, hi = window
    rows = {int(r["second"]): r for r in timeline}
    seconds = list(range(lo, hi))
    if not seconds:
        return None

    def mean(kind: str) -> float:
        return sum(rows.get(s, {}).get(kind, 0) for s in seconds) / len(seconds)

    fired, due = mean("fired"), mean("due")
    return {
        "window_s": [lo, hi],
        "seconds": len(seconds),
        "sent_per_s": round(mean("sent"), 1),
        "due_per_s": round(due, 1),
        "fired_per_s": round(fired, 1),
        "fired_to_due": round(fired / due, 4) if due else None,
    }


def due_not_fired(timeline: Sequence[dict[str, int]]) -> list[tuple[int, int]]:
    """(second, messages due by the end of that second but not yet fired): the end-to-end
    overdue backlog, from the recorded events."""
    out: list[tuple[int, int]] = []
    due = fired = 0
    for row in sorted(timeline, key=lambda r: int(r["second"])):
        due += int(row.get("due", 0))
        fired += int(row.get("fired", 0))
        out.append((int(row["second"]), due - fired))
    return out


def offset_gaps(records: Iterable[tuple[str, int, int]], limit: int = 20) -> dict[str, Any]:
    """Holes in the offsets of the recorded (topic, partition, offset) triples.

    Every record on a scenario's own output topics belongs to the run, and Chronos's producers
    are idempotent, not transactional (no control records), so between the first and the last
    offset read from a partition there should be no hole. A hole is a record the broker
    acknowledged and numbered but never served to the recorder: a message it lost, not one
    Chronos lost.
    """
    by_partition: dict[tuple[str, int], list[int]] = {}
    for topic, partition, offset in records:
        by_partition.setdefault((topic, int(partition)), []).append(int(offset))
    gaps: list[dict[str, Any]] = []
    missing = 0
    for (topic, partition), offsets in sorted(by_partition.items()):
        offsets.sort()
        for a, b in zip(offsets, offsets[1:], strict=False):
            if b > a + 1:
                missing += b - a - 1
                gaps.append(
                    {
                        "topic": topic,
                        "partition": partition,
                        "first": a + 1,
                        "last": b - 1,
                        "count": b - a - 1,
                    }
                )
    return {"missing": missing, "gaps": gaps[:limit], "gap_count": len(gaps)}


def _received_gaps(path: Path) -> dict[str, Any] | None:
    try:
        import pyarrow.parquet as pq

        table = pq.read_table(path, columns=["topic", "partition", "offset"])
    except Exception:  # noqa: BLE001 - an extra diagnostic, nothing depends on it
        return None
    cols = [table.column(c).to_pylist() for c in ("topic", "partition", "offset")]
    return offset_gaps(zip(*cols, strict=True))


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of y over x."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    var = sum((p[0] - mx) ** 2 for p in points)
    if var == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in points) / var


def backlog_verdict(
    samples: Sequence[dict[str, Any]],
    *,
    send_start_ms: int,
    send_end_ms: int,
    rate: float,
    mean_delay_s: float,
    window: tuple[int, int] | None,
    timeline: Sequence[dict[str, int]] = (),
) -> dict[str, Any]:
    """Whether the backlog grew while sending.

    Not growing means, at the end of sending: the table holds about ``rate x mean delay`` rows
    (Little's law; at most ``BACKLOG_TABLE_FACTOR`` times that plus one second of messages),
    the consumer lag is under ``BACKLOG_LAG_SECONDS`` of messages and the messages due but not
    yet fired (end to end, from the recorded events) under ``BACKLOG_E2E_SECONDS``; and, over the
    steady window, the table does not trend upwards (slope under 5 % of the rate) and the
    overdue unclaimed rows stay near zero (p90 under ``BACKLOG_OVERDUE_SECONDS`` of messages).
    A check without data is skipped.
    """
    expected = rate * mean_delay_s
    sending = [s for s in samples if send_start_ms <= s["t_ms"] <= send_end_ms]
    at_end = sending[-1] if sending else None
    checks: dict[str, dict[str, Any]] = {}

    def check(name: str, value: float | None, limit: float) -> None:
        if value is None:
            return
        checks[name] = {"value": round(value, 2), "limit": round(limit, 2), "ok": value <= limit}

    rows_end = None if at_end is None else _rows(at_end)
    check("rows_at_send_end", rows_end, sc.BACKLOG_TABLE_FACTOR * expected + rate)
    lag_end = None if at_end is None else at_end.get("consumer_lag")
    check("consumer_lag_at_send_end", lag_end, sc.BACKLOG_LAG_SECONDS * rate)
    steady: list[dict[str, Any]] = []
    if window is not None:
        lo_ms = send_start_ms + window[0] * 1000
        hi_ms = send_start_ms + window[1] * 1000
        steady = [s for s in samples if lo_ms <= s["t_ms"] <= hi_ms]
    points = [
        ((s["t_ms"] - send_start_ms) / 1000, float(r))
        for s in steady
        if (r := _rows(s)) is not None
    ]
    slope = _slope(points)
    check("rows_slope_per_s", slope, 0.05 * rate)
    overdue = [float(s["overdue"]) for s in steady if s.get("overdue") is not None]
    check("overdue_p90", _percentile(overdue, 0.9), sc.BACKLOG_OVERDUE_SECONDS * rate)
    e2e = None
    if timeline:
        end_second = (send_end_ms - send_start_ms) // 1000 - 1
        series = [v for second, v in due_not_fired(timeline) if second <= end_second]
        e2e = series[-1] if series else None
    check("due_not_fired_at_send_end", e2e, sc.BACKLOG_E2E_SECONDS * rate)
    return {
        "expected_rows": round(expected),
        "rows_at_send_end": rows_end,
        "max_rows": max((r for s in sending if (r := _rows(s)) is not None), default=None),
        "max_overdue": max(
            (s["overdue"] for s in sending if s.get("overdue") is not None), default=None
        ),
        "checks": checks,
        "growing": any(not c["ok"] for c in checks.values()) if checks else None,
    }


def _rows(sample: dict[str, Any]) -> int | None:
    if sample.get("waiting") is None or sample.get("claimed") is None:
        return None
    return int(sample["waiting"]) + int(sample["claimed"])


# ---------------------------------------------------------------------- target evaluation


def _by_kind(bench: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [r for r in bench.get("scenarios", []) if r.get("kind") == kind]


def _ok(rec: dict[str, Any] | None) -> bool:
    return rec is not None and rec.get("status") == "ok"


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def ceiling_rate(bench: dict[str, Any], name: str = "ceiling") -> float | None:
    """The ceiling measured first (the headline's reference), or the one named ``name``
    (``ceiling-end``: measured again after the scenarios, to show how the machine drifted)."""
    rec = next((r for r in _by_kind(bench, "ceiling") if r.get("name") == name), None)
    value = _get(rec, "result", "ceiling_msg_per_s") if _ok(rec) else None
    return float(value) if value else None


def capacity(bench: dict[str, Any]) -> tuple[float | None, str | None]:
    """Chronos's sustained throughput on one node and where it comes from: the steady fired
    rate of ``saturate`` (offered more than it can take) when it ran, else that of
    ``sustained`` (a lower bound: limited by the offered rate)."""
    for kind in ("saturate", "sustained"):
        rec = next(iter(_by_kind(bench, kind)), None)
        fired = _get(rec, "steady", "fired_per_s") if _ok(rec) else None
        if fired:
            return float(fired), kind
    return None, None


def _row(scenario: str, target: str, measured: str, ok: bool | None, note: str = "") -> dict:
    return {"scenario": scenario, "target": target, "measured": measured, "pass": ok, "note": note}


def _keeps_up(rec: dict[str, Any], rate: float) -> tuple[bool, str]:
    fired = _get(rec, "steady", "fired_per_s")
    lost = _get(rec, "summary", "counts", "lost")
    growing = _get(rec, "backlog", "growing")
    ok = (
        fired is not None
        and fired >= (1 - sc.RATE_TOLERANCE) * rate
        and lost == 0
        and growing is False
    )
    backlog = {True: "grew", False: "flat", None: "n/a"}[growing]
    text = f"{_fmt(fired)} msg/s fired (steady), {_fmt(lost)} lost, backlog {backlog}"
    return ok, _with_late(text, rec)


def _with_late(text: str, rec: dict[str, Any]) -> str:
    late = late_text(Delivery.from_dict(_get(rec, "summary", "delivery")))
    return f"{text}, {late}" if late else text


def evaluate(bench: dict[str, Any]) -> list[dict[str, Any]]:
    """The headline rows: scenario, target, measured, pass (True/False; None: not measured)."""
    rows: list[dict[str, Any]] = []
    ceiling = ceiling_rate(bench)
    rows.append(
        _row(
            "ceiling",
            "raw SQL insert/claim/delete on the same Postgres",
            f"{_fmt(ceiling)} msg/s",
            None,
            "reference",
        )
    )
    again = ceiling_rate(bench, "ceiling-end")
    if again is not None:
        rows.append(
            _row(
                "ceiling-end",
                "the same, measured again after the scenarios",
                f"{_fmt(again)} msg/s",
                None,
                "machine drift during the run",
            )
        )

    for kind, label in (("sustained", "1 node"), ("sustained2", "2 nodes")):
        for rec in _by_kind(bench, kind):
            w = rec.get("workload") or {}
            target = (
                f"{label}: >= {sc.SUSTAINED_RATE:,} msg/s for {_fmt(w.get('duration_s'), 0)}"
                f" s, {w.get('delay')}, backlog not growing"
            )
            if not _ok(rec):
                rows.append(_row(rec["name"], target, rec.get("error") or "did not run", False))
                continue
            ok, text = _keeps_up(rec, sc.SUSTAINED_RATE)
            rows.append(_row(rec["name"], target, text, ok))

    cap, source = capacity(bench)
    target = f"sustained throughput >= {sc.CEILING_RATIO} x ceiling"
    if cap is None or not ceiling:
        rows.append(_row("ratio", target, "n/a", None))
    else:
        ratio = cap / ceiling
        if source == "saturate":
            ok: bool | None = ratio >= sc.CEILING_RATIO
            offered = _get(next(iter(_by_kind(bench, "saturate")), None), "offered_rate")
            note = f"one node offered {_fmt(offered, 0)} msg/s ({sc.SATURATE_FACTOR} x ceiling)"
        else:
            ok = True if ratio >= sc.CEILING_RATIO else None
            note = "lower bound (limited by the offered rate); run 'saturate' to measure"
        rows.append(
            _row(
                source or "ratio",
                target,
                f"{_fmt(cap)} / {_fmt(ceiling)} msg/s = {ratio:.2f}",
                ok,
                note,
            )
        )

    floor = relay_floor(bench)
    if floor is not None:
        rows.append(
            _row(
                "relay",
                "the stack without Chronos (echo relay) at the precision load",
                f"lateness p99 {_fmt(floor.get('p99'))} ms, p99.9 {_fmt(floor.get('p99_9'))} ms",
                None,
                "the floor the load generator and the broker impose",
            )
        )
    for rec in _by_kind(bench, "precision"):
        name = rec["name"]
        if not _ok(rec):
            rows.append(_row(name, "precision", rec.get("error") or "did not run", False))
            continue
        late = _get(rec, "summary", "lateness_ms") or {}
        early = _get(rec, "summary", "early", "early_count")
        lost = _get(rec, "summary", "counts", "lost")
        p99, p999 = late.get("p99"), late.get("p99_9")
        rows.append(
            _row(
                name,
                f"p99 lateness <= {_fmt(sc.PRECISION_P99_MS, 0)} ms",
                f"{_fmt(p99)} ms",
                p99 is not None and p99 <= sc.PRECISION_P99_MS,
                _precision_note(rec, floor, "p99", sc.PRECISION_P99_MS),
            )
        )
        rows.append(
            _row(
                name,
                f"p99.9 lateness <= {_fmt(sc.PRECISION_P999_MS, 0)} ms",
                f"{_fmt(p999)} ms",
                p999 is not None and p999 <= sc.PRECISION_P999_MS,
                _precision_note(rec, floor, "p99_9", sc.PRECISION_P999_MS),
            )
        )
        rows.append(
            _row(
                name,
                "zero early, zero lost",
                _with_late(f"{_fmt(early)} early, {_fmt(lost)} lost", rec),
                early == 0 and lost == 0,
            )
        )

    for rec in _by_kind(bench, "burst"):
        w = rec.get("workload") or {}
        target = f"{_fmt(w.get('count'))} due at one instant drain at >= {sc.BURST_DRAIN_RATE:,}/s"
        if not _ok(rec):
            rows.append(_row(rec["name"], target, rec.get("error") or "did not run", False))
            continue
        drain = rec.get("drain") or {}
        rate, lost = drain.get("rate_per_s"), _get(rec, "summary", "counts", "lost")
        direct = _get(rec, "node_counters", "published_directly")
        note = f"{_fmt(direct)} published directly (arrived after the deadline)" if direct else ""
        rows.append(
            _row(
                rec["name"],
                target,
                _with_late(
                    f"{_fmt(rate)} msg/s over {_fmt(drain.get('seconds'), 2)} s, {_fmt(lost)} lost",
                    rec,
                ),
                rate is not None and rate >= sc.BURST_DRAIN_RATE and lost == 0,
                note,
            )
        )

    rows.extend(_backlog_rows(bench))

    measured = [
        r
        for r in bench.get("scenarios", [])
        if r.get("rss_max_mb") is not None and r.get("kind") != "relay"
    ]
    if measured:
        worst = max(measured, key=lambda r: r["rss_max_mb"])
        rows.append(
            _row(
                "all",
                f"node RSS < {sc.RSS_LIMIT_MB:.0f} MB in every scenario",
                f"max {worst['rss_max_mb']:.0f} MB ({worst['name']})",
                worst["rss_max_mb"] < sc.RSS_LIMIT_MB,
            )
        )
    checked = [
        r
        for r in bench.get("scenarios", [])
        if _ok(r) and r.get("kind") not in ("ceiling", "saturate", "relay")
    ]
    rows.extend(row.as_dict() for row in delivery_rows(checked))
    return rows


def relay_floor(bench: dict[str, Any]) -> dict[str, Any] | None:
    """Lateness of the ``relay`` control run (the stack without Chronos), if it ran."""
    rec = next(iter(_by_kind(bench, "relay")), None)
    return _get(rec, "summary", "lateness_ms") if _ok(rec) else None


def _precision_note(
    rec: dict[str, Any], floor: dict[str, Any] | None, key: str, limit: float
) -> str:
    """Why a precision figure may not be Chronos's: messages that reached it after their
    deadline, and a stack that misses the target without Chronos."""
    notes = []
    direct = _get(rec, "node_counters", "published_directly")
    if direct:
        notes.append(f"{_fmt(direct)} messages reached Chronos after their deadline")
        own = _get(rec, "node_lateness", f"{key}_ms")
        if own is not None:
            notes.append(
                f"the node's own histogram of the messages it held (at the broker's "
                f"acknowledgement): {own:,.0f} ms"
            )
    base = None if floor is None else floor.get(key)
    if base is not None and base > limit:
        notes.append(f"the stack without Chronos: {_fmt(base)} ms")
    return "; ".join(notes)


def _within(value: float | None, base: float | None, factor: float, slack: float) -> bool:
    if value is None or base is None:
        return False
    return value <= max(base * factor, base + slack)


def _backlog_rows(bench: dict[str, Any]) -> list[dict[str, Any]]:
    recs = _by_kind(bench, "backlog")
    if not recs:
        return []
    recs = sorted(recs, key=lambda r: r.get("preload_rows", 0))
    base, big = recs[0], recs[-1]
    name = big["name"]
    rows_label = f"{big.get('preload_rows', 0):,} rows"
    if len(recs) < 2 or not (_ok(base) and _ok(big)):
        bad = next((r for r in recs if not _ok(r)), None)
        why = (bad or {}).get("error") or "needs both the baseline and the big pre-load"
        return [_row(name, f"{rows_label}: matches the baseline", why, False)]
    out: list[dict[str, Any]] = []
    cb, cg = base.get("claim") or {}, big.get("claim") or {}
    ok = _within(
        cg.get("mean_ms"),
        cb.get("mean_ms"),
        sc.BACKLOG_CLAIM_MEAN_FACTOR,
        sc.BACKLOG_CLAIM_MEAN_SLACK_MS,
    ) and _within(
        cg.get("p99_ms"),
        cb.get("p99_ms"),
        sc.BACKLOG_CLAIM_P99_FACTOR,
        sc.BACKLOG_CLAIM_P99_SLACK_MS,
    )
    out.append(
        _row(
            name,
            f"claim latency with {rows_label} matches {base['name']}",
            f"mean {_fmt(cg.get('mean_ms'), 2)} vs {_fmt(cb.get('mean_ms'), 2)} ms, "
            f"p99 {_fmt(cg.get('p99_ms'), 2)} vs {_fmt(cb.get('p99_ms'), 2)} ms",
            ok,
        )
    )
    lb = _get(base, "summary", "lateness_ms") or {}
    lg = _get(big, "summary", "lateness_ms") or {}
    early = _get(big, "summary", "early", "early_count")
    p99, p999 = lg.get("p99"), lg.get("p99_9")
    ok = (
        _within(p99, lb.get("p99"), 1.0, sc.BACKLOG_P99_SLACK_MS)
        and _within(p999, lb.get("p99_9"), 1.0, sc.BACKLOG_P999_SLACK_MS)
        and p99 is not None
        and p99 <= sc.PRECISION_P99_MS
        and p999 is not None
        and p999 <= sc.PRECISION_P999_MS
        and early == 0
    )
    out.append(
        _row(
            name,
            f"precision with {rows_label} matches {base['name']} (p99 within "
            f"+{sc.BACKLOG_P99_SLACK_MS:g} ms, p99.9 within +{sc.BACKLOG_P999_SLACK_MS:g} ms, "
            "and on target)",
            f"p99 {_fmt(lg.get('p99'))} vs {_fmt(lb.get('p99'))} ms, p99.9 "
            f"{_fmt(lg.get('p99_9'))} vs {_fmt(lb.get('p99_9'))} ms, {_fmt(early)} early",
            ok,
        )
    )
    rss = big.get("rss_max_mb")
    out.append(
        _row(
            name,
            f"node RSS < {sc.RSS_LIMIT_MB:.0f} MB with {rows_label}",
            f"{_fmt(rss, 0)} MB (baseline {_fmt(base.get('rss_max_mb'), 0)} MB)",
            rss is not None and rss < sc.RSS_LIMIT_MB,
        )
    )
    return out


# ------------------------------------------------------------------------------- profiles

_FRAME_RE = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def _short_file(path: str) -> str:
    for marker in ("site-packages/", "/chronos/", "/loadtest/", "lib/python"):
        idx = path.rfind(marker)
        if idx >= 0:
            tail = path[idx + len(marker) :]
            return ("chronos/" + tail) if marker == "/chronos/" else tail
    return "/".join(path.split("/")[-2:])


def _frame_name(frame: str) -> str:
    m = _FRAME_RE.match(frame.strip())
    if not m:
        return frame.strip()
    return f"{m.group('func')} ({_short_file(m.group('file'))})"


def aggregate_profile(raw: str, top: int = TOP_FUNCTIONS) -> dict[str, Any]:
    """Self and total samples per function from py-spy's ``raw`` (collapsed stacks) output.

    Each line is ``frame;frame;...;frame count`` (outermost first); with ``--threads`` the first
    frame names the thread. Self time goes to the innermost frame, total time once to every
    distinct function on the stack.
    """
    total_samples = 0
    self_counts: dict[str, int] = {}
    total_counts: dict[str, int] = {}
    threads: dict[str, int] = {}
    for line in raw.splitlines():
        line = line.rstrip()
        if not line:
            continue
        stack, _, count_text = line.rpartition(" ")
        try:
            count = int(count_text)
        except ValueError:
            continue
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        if frames[0].startswith(("thread ", "process ")):
            threads[frames[0]] = threads.get(frames[0], 0) + count
            frames = frames[1:]
            if frames and frames[0].startswith("thread "):
                threads[frames[0]] = threads.get(frames[0], 0) + count
                frames = frames[1:]
        total_samples += count
        if not frames:
            continue
        names = [_frame_name(f) for f in frames]
        self_counts[names[-1]] = self_counts.get(names[-1], 0) + count
        for name in set(names):
            total_counts[name] = total_counts.get(name, 0) + count

    def ranked(counts: dict[str, int]) -> list[dict[str, Any]]:
        items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        return [
            {
                "function": k,
                "samples": v,
                "percent": round(100 * v / total_samples, 1) if total_samples else 0.0,
            }
            for k, v in items
        ]

    return {
        "samples": total_samples,
        "threads": dict(sorted(threads.items(), key=lambda kv: -kv[1])),
        "self": ranked(self_counts),
        "total": ranked(total_counts),
    }


def profile_text(profile: dict[str, Any]) -> str:
    lines = [f"{profile['samples']} samples"]
    for title in ("self", "total"):
        lines += ["", f"{title:>5}  % samples  function"]
        for item in profile[title]:
            lines.append(f"{item['percent']:>6.1f}  {item['samples']:>8}  {item['function']}")
    if profile.get("threads"):
        lines += ["", "threads"]
        lines += [f"{count:>8}  {name}" for name, count in profile["threads"].items()]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------- report


def _pass_text(ok: bool | None) -> str:
    return {True: "**pass**", False: "**FAIL**", None: "—"}[ok]


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def render_markdown(bench: dict[str, Any]) -> str:
    """BENCHMARK.md: headline, targets, scenario details, machine facts and links."""
    lines: list[str] = ["# Chronos benchmark", ""]
    if bench.get("quick"):
        lines += [
            "> **Quick mode**: a smoke test with shrunken scenarios, not the headline benchmark.",
            "",
        ]
    ceiling = ceiling_rate(bench)
    cap, source = capacity(bench)
    if cap and ceiling:
        kind = "capacity" if source == "saturate" else "sustained rate (offered-limited)"
        lines.append(
            f"**One Chronos node: {cap:,.0f} msg/s {kind} = {cap / ceiling:.2f} x the ceiling "
            f"({ceiling:,.0f} msg/s, the raw SQL pipeline measured in the same run on the same "
            "Postgres).**"
        )
        sustained = next(iter(_by_kind(bench, "sustained")), None)
        fired = _get(sustained, "steady", "fired_per_s") if _ok(sustained) else None
        if fired and source != "sustained":
            lines.append(
                f"At the 10,000 msg/s target load it fired {fired:,.0f} msg/s "
                f"({fired / ceiling:.2f} x the ceiling)."
            )
        lines.append("")
    lines += [
        f"Command: `{bench.get('command', '')}`  ",
        f"Started {bench.get('started', '?')}, finished {bench.get('ended', '?')} "
        f"({_fmt(bench.get('elapsed_s'), 0)} s).",
        "",
        "## Targets",
        "",
        "| scenario | target | measured | result |",
        "|---|---|---|---|",
    ]
    for row in bench.get("targets", []):
        measured = row["measured"] + (f" ({row['note']})" if row.get("note") else "")
        lines.append(
            f"| {row['scenario']} | {_md_escape(row['target'])} | "
            f"{_md_escape(measured)} | {_pass_text(row['pass'])} |"
        )
    lines += ["", "## Scenarios", ""]
    lines += [
        "| scenario | nodes | load | sent | fired | lost | late after window | dup ids | "
        "lateness p50 / p99 / p99.9 / max ms | early | steady fired/s | claim mean / p99 ms | "
        "node RSS max MB | node CPU s | backlog |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rec in bench.get("scenarios", []):
        if rec.get("kind") == "ceiling":
            continue
        if not _ok(rec):
            lines.append(
                f"| {rec['name']} | {rec.get('nodes')} | {rec.get('load', '')} | "
                f"{_md_escape(rec.get('error') or rec.get('status', ''))} |" + " |" * 11
            )
            continue
        counts = _get(rec, "summary", "counts") or {}
        late = _get(rec, "summary", "lateness_ms") or {}
        claim = rec.get("claim") or {}
        growing = _get(rec, "backlog", "growing")
        lines.append(
            "| "
            + " | ".join(
                [
                    rec["name"],
                    str(rec.get("nodes")),
                    rec.get("load", ""),
                    _fmt(counts.get("sent")),
                    _fmt(counts.get("fired_distinct")),
                    _fmt(counts.get("lost")),
                    _fmt(_get(rec, "summary", "delivery", "late_after_window")),
                    _fmt(counts.get("duplicate_ids")),
                    " / ".join(_fmt(late.get(k)) for k in ("p50", "p99", "p99_9", "max")),
                    _fmt(_get(rec, "summary", "early", "early_count")),
                    _fmt(_get(rec, "steady", "fired_per_s")),
                    f"{_fmt(claim.get('mean_ms'), 2)} / {_fmt(claim.get('p99_ms'), 2)}",
                    _fmt(rec.get("rss_max_mb"), 0),
                    _fmt(_get(rec, "cpu", "nodes_s")),
                    {True: "grew", False: "flat", None: "—"}[growing],
                ]
            )
            + " |"
        )
    lines += [
        "",
        "CPU seconds per component during each load (the machine is shared: *other* is "
        "every process that is not part of the benchmark):",
        "",
        "| scenario | wall s | nodes | postgres | broker | load generator | other | machine busy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rec in bench.get("scenarios", []):
        cpu = rec.get("cpu")
        if not cpu:
            continue
        lines.append(
            "| "
            + " | ".join(
                [rec["name"]]
                + [
                    _fmt(cpu.get(k))
                    for k in (
                        "wall_s",
                        "nodes_s",
                        "postgres_s",
                        "broker_s",
                        "harness_s",
                        "other_s",
                        "machine_busy_s",
                    )
                ]
            )
            + " |"
        )
    stalled = [r for r in bench.get("scenarios", []) if r.get("stalls")]
    if stalled:
        lines += ["", "### Stalls", ""]
        for rec in stalled:
            for stall in rec["stalls"]:
                lines.append(
                    f"- **{rec['name']}**: node {stall['node']} fired nothing for "
                    f"{STALL_SECONDS:.0f} s while {_fmt(stall.get('overdue'))} rows were overdue; "
                    f"thread stacks and database sessions in [{stall['file']}]"
                    f"({rec['name']}/{stall['file']})."
                )
    extra = [r for r in bench.get("scenarios", []) if r.get("kind") in ("burst", "backlog")]
    if extra:
        lines += ["", "### Burst and backlog", ""]
        for rec in extra:
            if rec.get("kind") == "burst" and rec.get("drain"):
                d, intake = rec["drain"], rec.get("intake") or {}
                lines.append(
                    f"- **{rec['name']}**: {_fmt(d.get('count'))} messages fired in "
                    f"{_fmt(d.get('seconds'), 2)} s from the first fire to the last = "
                    f"{_fmt(d.get('rate_per_s'))} msg/s; all stored "
                    f"{_fmt(intake.get('stored_after_s'))} s after the first send "
                    f"({_fmt(intake.get('rate_per_s'))} msg/s intake); "
                    f"{_fmt(_get(rec, 'node_counters', 'published_directly'))} published "
                    "directly."
                )
            if rec.get("kind") == "backlog":
                pre = rec.get("preload") or {}
                lines.append(
                    f"- **{rec['name']}**: {_fmt(pre.get('rows'))} rows pre-loaded in "
                    f"{_fmt(pre.get('seconds'))} s ({_fmt(pre.get('table_mb'), 0)} MB table + "
                    f"indexes); claims {_fmt(_get(rec, 'claim', 'count'))}, "
                    f"{_fmt(_get(rec, 'claim', 'rows_per_claim'))} rows each."
                )
    machine = bench.get("machine", {})
    lines += ["", "## Machine", ""]
    for key, label in (
        ("cpu_model", "CPU"),
        ("cores", "cores"),
        ("memory_gb", "memory GB"),
        ("loadavg_start", "load average at start (1, 5, 15 min)"),
        ("loadavg_end", "load average at end"),
        ("kernel", "kernel"),
        ("python", "Python"),
        ("postgres", "Postgres"),
        ("chronos", "Chronos"),
        ("commit", "commit"),
    ):
        value = machine.get(key)
        if isinstance(value, list):
            value = ", ".join(f"{v:.2f}" for v in value)
        lines.append(f"- {label}: {value if value is not None else 'n/a'}")
    stack = bench.get("stack", {})
    if stack:
        lines.append(
            f"- stack: Postgres durable={stack.get('postgres_durable')}, "
            f"{stack.get('partitions')} partitions per topic, node settings "
            f"{stack.get('node_settings_summary', '')}"
        )
    lines += ["", "## Reports", ""]
    for rec in bench.get("scenarios", []):
        files = rec.get("files") or {}
        links = [f"[{label}]({path})" for label, path in files.items()]
        if links:
            lines.append(f"- {rec['name']}: " + ", ".join(links))
    profiles = [r for r in bench.get("scenarios", []) if r.get("profile")]
    if profiles:
        lines += ["", "## Profiles", ""]
        for rec in profiles:
            prof = rec["profile"]
            lines += [
                f"### {rec['name']} (node 0, {prof['samples']} samples holding the GIL)",
                "",
                "| self % | total % | function |",
                "|---|---|---|",
            ]
            totals = {i["function"]: i["percent"] for i in prof["total"]}
            for item in prof["self"][:15]:
                lines.append(
                    f"| {item['percent']} | {totals.get(item['function'], '')} | "
                    f"`{_md_escape(item['function'])}` |"
                )
            lines.append("")
    return "\n".join(lines) + "\n"


# ============================================================================ processes

# Children start through this launcher: it asks Linux to signal the child when the benchmark
# dies (so nothing outlives a killed run), then execs the real command. A preexec_fn would do the
# same, but is unsafe in a process that runs threads.
_LAUNCHER = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, int(sys.argv[1]), 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[2]):\n"
    "    os._exit(70)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[3:]])\n"
)


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOS_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def launch(
    args: Sequence[str],
    *,
    log_path: Path,
    env: dict[str, str],
    death_signal: signal.Signals = signal.SIGKILL,
) -> subprocess.Popen[bytes]:
    """``python <args>`` from the repository root, output to ``log_path``."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(int(death_signal)), str(os.getpid()), *args],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def rss_kb(pid: int) -> int | None:
    text = _read(f"/proc/{pid}/status")
    return None if text is None else parse_status_kb(text, "VmRSS")


def hwm_kb(pid: int) -> int | None:
    text = _read(f"/proc/{pid}/status")
    return None if text is None else parse_status_kb(text, "VmHWM")


def proc_stat(pid: int) -> ProcStat | None:
    text = _read(f"/proc/{pid}/stat")
    try:
        return None if text is None else parse_proc_stat(text)
    except (IndexError, ValueError):
        return None


def _tree_ticks(root: int | None) -> int:
    """CPU ticks of ``root``, its reaped children and its live children (Postgres backends)."""
    if root is None:
        return 0
    top = proc_stat(root)
    if top is None:
        return 0
    ticks = top.ticks + top.child_ticks
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == root:
            continue
        st = proc_stat(int(entry.name))
        if st is not None and st.ppid == root:
            ticks += st.ticks + st.child_ticks
    return ticks


_PARTITION_RE = re.compile(r"'([^'\[\]]+)\[(\d+)\]'")


@dataclass
class NodeProcess:
    """One ``python -m chronos run`` process."""

    index: int
    settings: Any  # chronos.settings.Settings
    process: subprocess.Popen[bytes]
    log_path: Path
    _offset: int = 0
    _partial: bytes = b""
    _held: set[int] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        return int(self.settings.http_port)

    def alive(self) -> bool:
        return self.process.poll() is None

    def _get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        if not self.port:
            raise urllib.error.URLError("no HTTP server")
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, ""

    def ready(self) -> bool:
        try:
            return self._get("/health/ready", 2.0)[0] == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def metrics_text(self) -> str:
        try:
            return self._get("/metrics")[1]
        except (urllib.error.URLError, OSError, ValueError):
            return ""

    def assignment(self, topic: str) -> set[int]:
        """Input partitions held now, from the node's ``partitions_assigned/revoked`` events."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return set(self._held)
        self._offset += len(chunk)
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        for raw in complete:
            if not raw.startswith(b"{"):
                continue
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            kind = event.get("event")
            if kind not in ("partitions_assigned", "partitions_revoked"):
                continue
            parts = {
                int(p) for t, p in _PARTITION_RE.findall(event.get("message", "")) if t == topic
            }
            if kind == "partitions_assigned":
                self._held |= parts
            else:
                self._held -= parts
        return set(self._held)

    def stop(self, timeout: float) -> int | None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)
            return None


@dataclass(frozen=True)
class Topics:
    input: str
    output: str
    dead_letter: str
    group: str

    def all(self) -> list[str]:
        return [self.input, self.output, self.dead_letter]


SAMPLE_SQL = """
SELECT
  (SELECT count(*) FROM chronos_messages
    WHERE readied_at IS NULL AND deadline < now() + interval '1 day') AS waiting,
  (SELECT count(*) FROM chronos_messages WHERE readied_at IS NOT NULL) AS claimed,
  (SELECT count(*) FROM chronos_messages WHERE readied_at IS NULL AND deadline < now()) AS overdue,
  (SELECT extract(epoch FROM now() - min(deadline))::float8 FROM chronos_messages
    WHERE readied_at IS NULL AND deadline < now()) AS oldest_overdue_s
"""
"""What the sampler reads every second. Pre-loaded rows (days ahead) are never counted: the
partial ``due`` index range stops at ``now() + 1 day``."""

PRELOAD_SQL = """
INSERT INTO chronos_messages (id, deadline, message_key, message_value, message_headers)
SELECT 'preload-' || g,
       now() + interval '7 days' + g * interval '1 millisecond',
       convert_to('key-' || (g %% 1000), 'UTF8'),
       %(value)s::bytea,
       '[{"trace": "MQ=="}]'::jsonb
FROM generate_series(1::bigint, %(rows)s::bigint) AS g
"""
"""Far-future rows (7 days ahead, one per millisecond after that): they never fire."""


class Stack:
    """Embedded Postgres and broker on free ports, plus the node processes of one scenario."""

    def __init__(
        self, data_dir: Path, logs_dir: Path, partitions: int, node_env: dict[str, str]
    ) -> None:
        self.data_dir = data_dir
        self.logs_dir = logs_dir
        self.partitions = partitions
        self.node_env = node_env
        self.postgres: Any = None
        self.broker: Any = None
        self.url = ""
        self.bootstrap = ""
        self.nodes: list[NodeProcess] = []

    def start(self) -> None:
        from chronos import migrate
        from chronos.embedded import EmbeddedBroker, EmbeddedPostgres

        self.postgres = EmbeddedPostgres(self.data_dir / "postgres", 0, durable=True)
        self.url = self.postgres.start()
        self.broker = EmbeddedBroker(0, log_dir=self.logs_dir)
        self.bootstrap = self.broker.start()
        migrate.upgrade(self.url)

    @property
    def postgres_pid(self) -> int | None:
        return None if self.postgres is None else self.postgres.pid

    @property
    def broker_pid(self) -> int | None:
        return None if self.broker is None else self.broker.pid

    def sql(self, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(statement, params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def postgres_version(self) -> str | None:
        try:
            return str(self.sql("SHOW server_version")[0][0])
        except Exception:  # noqa: BLE001 - a fact for the report, nothing more
            return None

    def topics(self, name: str) -> Topics:
        from chronos.embedded import create_topics

        topics = Topics(
            f"bench-{name}-input",
            f"bench-{name}-output",
            f"bench-{name}-dead-letter",
            f"bench-{name}",
        )
        create_topics(self.bootstrap, {t: self.partitions for t in topics.all()})
        return topics

    def fresh_broker(self) -> None:
        """Restart the in-memory broker (same port): every scenario starts on an empty one, so
        none inherits the records, topics or housekeeping of the one before."""
        if self.broker is not None and self.broker.running:
            self.bootstrap = self.broker.restart()

    def reset_table(self) -> None:
        self.sql("TRUNCATE chronos_messages")
        self.sql("DELETE FROM chronos_nodes")

    def preload(self, rows: int, payload_bytes: int = 100) -> dict[str, Any]:
        started = time.monotonic()
        self.sql(PRELOAD_SQL, {"rows": rows, "value": b"p" * payload_bytes})
        inserted = time.monotonic() - started
        self.sql("VACUUM (ANALYZE) chronos_messages")
        self.sql("CHECKPOINT")
        size = self.sql("SELECT pg_total_relation_size('chronos_messages')")[0][0]
        return {
            "rows": rows,
            "insert_s": round(inserted, 1),
            "seconds": round(time.monotonic() - started, 1),
            "table_mb": round(int(size) / MB, 1),
        }

    def node_settings(self, topics: Topics) -> Any:
        from chronos import settings as chronos_settings

        return chronos_settings.load(
            None,
            environ=dict(self.node_env),
            input_topic=topics.input,
            output_topic=topics.output,
            dead_letter_topic=topics.dead_letter,
            consumer_group=topics.group,
            http_host="127.0.0.1",
            log_format="json",
        )

    def start_nodes(self, count: int, topics: Topics, log_dir: Path) -> list[NodeProcess]:
        from chronos import settings as chronos_settings
        from chronos.dev import DEV_SESSION_TIMEOUT_MS, node_settings
        from chronos.embedded import free_port

        assert DEV_SESSION_TIMEOUT_MS == SESSION_TIMEOUT_MS
        base = self.node_settings(topics)
        for index in range(count):
            # node_settings gives node `index` the port base + index and a fresh node id.
            port = free_port()
            settings = node_settings(base, self.url, self.bootstrap, index, port - index)
            env = _clean_env(chronos_settings.as_environment(settings))
            log_path = log_dir / f"node-{index}.log"
            process = launch(["-m", "chronos", "run"], log_path=log_path, env=env)
            self.nodes.append(NodeProcess(index, settings, process, log_path))
        return list(self.nodes)

    def start_relay(self, topics: Topics, log_dir: Path, timeout: float = 60.0) -> NodeProcess:
        """The harness's echo relay in place of a node (no HTTP server, no database)."""
        import types

        settings = types.SimpleNamespace(http_port=0, timing_advance_ms=50)
        argv = ["-m", "loadtest", "relay", "--bootstrap", self.bootstrap,
                "--input-topic", topics.input, "--output-topic", topics.output,
                "--dead-letter-topic", topics.dead_letter,
                "--timing-advance-ms", str(settings.timing_advance_ms)]  # fmt: skip
        log_path = log_dir / "relay.log"
        node = NodeProcess(0, settings, launch(argv, log_path=log_path, env=_clean_env()), log_path)
        self.nodes.append(node)
        limit = time.monotonic() + timeout
        while "relay running" not in (_read(str(log_path)) or ""):
            if not node.alive() or time.monotonic() > limit:
                raise RuntimeError(f"the echo relay did not start; see {log_path}")
            time.sleep(0.1)
        return node

    def wait_ready(
        self, nodes: Sequence[NodeProcess], topics: Topics, timeout: float = READY_TIMEOUT_S
    ) -> None:
        """Every node answers /health/ready, and the group holds every input partition (each
        node some), unchanged for a second."""
        limit = time.monotonic() + timeout
        pending = list(nodes)
        while pending:
            for node in list(pending):
                if not node.alive():
                    raise RuntimeError(
                        f"node {node.index} exited with {node.process.poll()} "
                        f"before it was ready; see {node.log_path}"
                    )
                if node.ready():
                    pending.remove(node)
            if time.monotonic() > limit:
                raise RuntimeError(f"nodes {[n.index for n in pending]} not ready in {timeout} s")
            if pending:
                time.sleep(0.2)
        wanted = set(range(self.partitions))
        settled: float | None = None
        last: list[set[int]] | None = None
        while True:
            held = [n.assignment(topics.input) for n in nodes]
            union = set().union(*held)
            good = (
                union == wanted
                and sum(len(h) for h in held) == len(union)
                and (all(held) or len(nodes) > len(wanted))
            )
            now = time.monotonic()
            if good and held == last:
                settled = settled or now
                if now - settled >= 1.0:
                    return
            else:
                settled = None
            last = held
            if now > limit:
                raise RuntimeError(f"consumer group did not settle in {timeout} s: {held}")
            if any(not n.alive() for n in nodes):
                raise RuntimeError("a node exited while the consumer group was settling")
            time.sleep(0.2)

    def stop_nodes(self) -> dict[int, int | None]:
        codes: dict[int, int | None] = {}
        timeout = 20.0
        for node in self.nodes:
            if node.alive():
                with contextlib.suppress(ProcessLookupError):
                    node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            codes[node.index] = node.stop(timeout)
        self.nodes = []
        return codes

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.stop_nodes()
        if self.broker is not None:
            with contextlib.suppress(Exception):
                self.broker.stop()
        if self.postgres is not None:
            log_path = self.postgres.log_path
            with contextlib.suppress(Exception):
                self.postgres.stop()
            with contextlib.suppress(OSError):
                shutil.copyfile(log_path, self.logs_dir / "postgres.log")


class Sampler(threading.Thread):
    """Every second: node RSS, the table's waiting/claimed/overdue rows, consumer lag."""

    def __init__(
        self,
        url: str,
        nodes: Sequence[NodeProcess],
        interval: float = SAMPLE_INTERVAL_S,
        stall_dir: Path | None = None,
    ) -> None:
        super().__init__(name="bench-sampler", daemon=True)
        self.url = url
        self.nodes = list(nodes)
        self.interval = interval
        self.samples: list[dict[str, Any]] = []
        self.rss_max_kb: dict[int, int] = {}
        self.stall_dir = stall_dir
        self.stalls: list[dict[str, Any]] = []
        self._watch = {n.index: StallWatch() for n in self.nodes}
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)

    def run(self) -> None:
        import psycopg

        conn: Any = None
        next_at = time.monotonic()
        while not self._stop_event.is_set():
            sample: dict[str, Any] = {
                "t_ms": int(time.time() * 1000),
                "load1": round(os.getloadavg()[0], 2),
            }
            for node in self.nodes:
                rss = rss_kb(node.pid)
                sample[f"rss_mb_{node.index}"] = None if rss is None else round(rss / 1024, 1)
                if rss is not None:
                    self.rss_max_kb[node.index] = max(self.rss_max_kb.get(node.index, 0), rss)
            try:
                if conn is None:
                    conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
                    conn.execute("SET statement_timeout = '5s'")
                row = conn.execute(SAMPLE_SQL).fetchone()
                sample.update(
                    waiting=row[0],
                    claimed=row[1],
                    overdue=row[2],
                    oldest_overdue_s=None if row[3] is None else round(row[3], 3),
                )
            except Exception:  # noqa: BLE001 - a missed sample, retried next second
                with contextlib.suppress(Exception):
                    if conn is not None:
                        conn.close()
                conn = None
            lag = in_flight = 0.0
            scraped = False
            for node in self.nodes:
                samples = parse_prometheus(node.metrics_text())
                value = metric_total(samples, "chronos_consumer_lag_messages")
                held = metric_total(samples, "chronos_in_flight_messages")
                fired = metric_total(samples, "chronos_fired_messages_total")
                if value is not None:
                    lag += value
                    scraped = True
                in_flight += held or 0.0
                t = sample["t_ms"] / 1000
                if self._watch[node.index].stalled(t, fired, sample.get("overdue")):
                    self._record_stall(node, conn, sample)
            sample["consumer_lag"] = lag if scraped else None
            sample["in_flight"] = in_flight
            self.samples.append(sample)
            next_at += self.interval
            self._stop_event.wait(max(0.0, next_at - time.monotonic()))
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _record_stall(self, node: NodeProcess, conn: Any, sample: dict[str, Any]) -> None:
        """The node fires nothing while rows are overdue: keep its thread stacks and what the
        database sessions are doing, for whoever investigates."""
        if self.stall_dir is None:
            return
        path = self.stall_dir / f"stall-node{node.index}.txt"
        parts = [
            f"stall of node {node.index} (pid {node.pid}) at {sample['t_ms']} ms: "
            f"no message fired for {STALL_SECONDS:.0f} s while {sample.get('overdue')} "
            "rows are overdue",
            "",
        ]
        binary = _py_spy()
        if binary is not None:
            try:
                dump = subprocess.run(
                    [binary, "dump", "-p", str(node.pid), "--locals"],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                parts += ["== py-spy dump", dump.stdout, dump.stderr]
            except (OSError, subprocess.SubprocessError) as exc:
                parts.append(f"py-spy dump failed: {exc}")
        if conn is not None:
            with contextlib.suppress(Exception):
                rows = conn.execute(ACTIVITY_SQL).fetchall()
                parts.append("== pg_stat_activity")
                parts += [" | ".join("" if v is None else str(v) for v in row) for row in rows]
        path.write_text("\n".join(parts) + "\n")
        self.stalls.append(
            {
                "node": node.index,
                "t_ms": sample["t_ms"],
                "overdue": sample.get("overdue"),
                "file": path.name,
            }
        )


STALL_SECONDS = 10.0
"""A node that fires nothing for this long while rows are overdue is stalled."""

ACTIVITY_SQL = """
SELECT pid, application_name, state, wait_event_type, wait_event,
       round(extract(epoch FROM now() - query_start)::numeric, 3) AS running_s,
       left(regexp_replace(query, '\\s+', ' ', 'g'), 160) AS query
FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
ORDER BY query_start
"""


class StallWatch:
    """Tells once when a node's fired counter has not moved for ``STALL_SECONDS`` while rows
    are overdue."""

    def __init__(self, seconds: float = STALL_SECONDS) -> None:
        self.seconds = seconds
        self.last_fired: float | None = None
        self.since: float | None = None
        self.reported = False

    def stalled(self, t: float, fired: float | None, overdue: int | None) -> bool:
        if fired is None or self.reported:
            return False
        if fired != self.last_fired or not overdue:
            self.last_fired, self.since = fired, t
            return False
        if self.since is not None and t - self.since >= self.seconds:
            self.reported = True
            return True
        return False


@dataclass
class CpuSnapshot:
    wall: float
    nodes: dict[int, int]
    postgres: int
    broker: int
    machine_busy: int
    children_s: float  # reaped children of this process (the load generator)


def cpu_snapshot(stack: Stack, nodes: Sequence[NodeProcess]) -> CpuSnapshot:
    text = _read("/proc/stat") or "cpu 0 0 0 0"
    busy, _ = parse_machine_cpu(text)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return CpuSnapshot(
        wall=time.monotonic(),
        nodes={n.index: (st.ticks if (st := proc_stat(n.pid)) else 0) for n in nodes},
        postgres=_tree_ticks(stack.postgres_pid),
        broker=_tree_ticks(stack.broker_pid),
        machine_busy=busy,
        children_s=usage.ru_utime + usage.ru_stime,
    )


def cpu_delta(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, Any]:
    hz = os.sysconf("SC_CLK_TCK")
    nodes = {i: (after.nodes.get(i, 0) - before.nodes.get(i, 0)) / hz for i in after.nodes}
    nodes_s = sum(nodes.values())
    pg = (after.postgres - before.postgres) / hz
    broker = (after.broker - before.broker) / hz
    harness = after.children_s - before.children_s
    machine = (after.machine_busy - before.machine_busy) / hz
    wall = after.wall - before.wall
    return {
        "wall_s": round(wall, 1),
        "nodes_s": round(nodes_s, 1),
        "per_node_s": {str(i): round(v, 1) for i, v in nodes.items()},
        "node_util": round(nodes_s / wall, 3) if wall > 0 else None,
        "postgres_s": round(pg, 1),
        "broker_s": round(broker, 1),
        "harness_s": round(harness, 1),
        "machine_busy_s": round(machine, 1),
        "machine_util": round(machine / wall / (os.cpu_count() or 1), 3) if wall > 0 else None,
        "other_s": round(max(0.0, machine - nodes_s - pg - broker - harness), 1),
    }


# ============================================================================ scenarios


class Interrupted(Exception):
    """Ctrl-C or SIGTERM."""


@dataclass
class Context:
    out: Path
    stack: Stack
    quick: bool
    profile: set[str]
    profile_seconds: float
    analyze_memory: str = "4g"


def _say(message: str) -> None:
    stamp = datetime.now().strftime("%H:%M:%S")
    print(f"bench {stamp} {message}", file=sys.stderr, flush=True)


def run_ceiling_scenario(ctx: Context, scenario: Scenario) -> dict[str, Any]:
    from loadtest.ceiling import run_ceiling

    sdir = ctx.out / scenario.name
    sdir.mkdir(parents=True, exist_ok=True)
    tag = f"[{scenario.name}]"
    _say(f"{tag} raw SQL pipeline on the same Postgres for {scenario.ceiling_seconds:g} s")
    result = run_ceiling(
        ctx.stack.url, seconds=scenario.ceiling_seconds, warmup=scenario.ceiling_warmup_s
    )
    data = asdict(result)
    (sdir / "ceiling.json").write_text(json.dumps(data, indent=2) + "\n")
    _say(
        f"{tag} {result.ceiling_msg_per_s:,.0f} msg/s (claim {result.claim_ms_avg} ms, "
        f"delete {result.delete_ms_avg} ms, insert {result.insert_ms_avg} ms per 2,000 rows)"
    )
    return {
        **scenario.as_dict(),
        "status": "ok",
        "result": data,
        "files": {"ceiling.json": f"{scenario.name}/ceiling.json"},
    }


def _offered_rate(scenario: Scenario, ceiling: float | None) -> float:
    assert scenario.workload is not None
    if scenario.workload.rate_from_ceiling:
        return (
            float(round(sc.SATURATE_FACTOR * ceiling, -2)) if ceiling else 2.0 * sc.SUSTAINED_RATE
        )
    return scenario.workload.rate


def _profile_start_s(w: Workload) -> float:
    window = w.steady_window_s()
    if window is not None:
        return window[0] + 1.0
    low, _, _ = w.delay_bounds_s()
    return max(0.0, low - 1.0) if w.is_burst() else low


def _py_spy() -> str | None:
    sibling = Path(sys.executable).parent / "py-spy"
    return str(sibling) if sibling.exists() else shutil.which("py-spy")


class Profiler(threading.Thread):
    """py-spy on one node for ``seconds``, ``delay`` seconds after the load starts."""

    def __init__(self, pid: int, delay: float, seconds: float, raw_path: Path) -> None:
        super().__init__(name="bench-profiler", daemon=True)
        self.pid, self.delay, self.seconds, self.raw_path = pid, delay, seconds, raw_path
        self.cancel = threading.Event()
        self.error: str | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def run(self) -> None:
        binary = _py_spy()
        if binary is None:
            self.error = "py-spy not found"
            return
        if self.cancel.wait(self.delay):
            return
        argv = [
            binary,
            "record",
            "-p",
            str(self.pid),
            "-d",
            str(int(self.seconds)),
            "-r",
            "100",
            "-f",
            "raw",
            "-o",
            str(self.raw_path),
            "--threads",
            "--gil",
            "--nonblocking",
        ]
        log = self.raw_path.with_suffix(".log")
        with log.open("wb") as sink:
            self.proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
        try:
            code = self.proc.wait(self.seconds + 60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if code != 0:
            self.error = f"py-spy exited with {code} (see {log.name})"

    def stop(self) -> None:
        self.cancel.set()
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGINT)
        self.join(90)


def _wait_child(proc: subprocess.Popen[bytes], what: str) -> int:
    """Wait for a child; on Ctrl-C give it SIGINT (the load generator still writes its
    files), then kill it if it lingers."""
    try:
        return proc.wait()
    except KeyboardInterrupt:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise Interrupted(f"interrupted during {what}") from None


def _summary_subset(summary: dict[str, Any]) -> dict[str, Any]:
    counts = dict(summary.get("counts", {}))
    counts.pop("lost_sample", None)
    tp = summary.get("throughput", {})
    return {
        "counts": counts,
        "lateness_ms": summary.get("lateness_ms"),
        "receive_lateness_ms": summary.get("receive_lateness_ms"),
        "early": summary.get("early"),
        "producer": summary.get("producer"),
        "window": summary.get("window"),
        "throughput": {
            k: tp.get(k) for k in ("sent_mean_per_s", "fired_mean_per_s", "fired_peak_per_s")
        },
        "lost_sample": summary.get("counts", {}).get("lost_sample", [])[:5],
        "delivery": summary.get("delivery"),
    }


NODE_COUNTERS = {
    "consumed": "chronos_consumed_messages_total",
    "enqueued": "chronos_enqueued_messages_total",
    "published_directly": "chronos_published_directly_messages_total",
    "fired": "chronos_fired_messages_total",
    "duplicates": "chronos_duplicate_messages_total",
    "dead_lettered": "chronos_dead_lettered_messages_total",
    "suspected_failures": "chronos_suspected_failures_total",
    "publish_errors": "chronos_publish_errors_total",
    "database_errors": "chronos_database_errors_total",
    "fenced_deletes": "chronos_fenced_deletes_total",
}


def node_metrics(before: Sequence[str], after: Sequence[str], seconds: float) -> dict[str, Any]:
    """Statement latencies, batch sizes and counters between two scrapes of every node."""
    b = [s for text in before for s in parse_prometheus(text)]
    a = [s for text in after for s in parse_prometheus(text)]
    name = "chronos_statement_duration_seconds"
    out: dict[str, Any] = {"statements": {}}
    for statement in ("claim", "delete", "enqueue"):
        out["statements"][statement] = histogram_summary(
            histogram(a, name, statement=statement),
            histogram(b, name, statement=statement),
            seconds,
        )
    for statement in ("claim", "delete", "enqueue"):
        rows_after = histogram(a, "chronos_batch_size_messages", operation=statement)
        if rows_after is not None:
            rows = rows_after.minus(
                histogram(b, "chronos_batch_size_messages", operation=statement)
            )
            mean = None if rows.mean is None else round(rows.mean, 1)
            out["statements"][statement]["rows_per_statement"] = mean
    claim = dict(out["statements"]["claim"])
    claim["rows_per_claim"] = claim.pop("rows_per_statement", None)
    out["claim"] = claim
    counters = {}
    for key, metric in NODE_COUNTERS.items():
        after_v = metric_total(a, metric)
        before_v = metric_total(b, metric) or 0.0
        counters[key] = None if after_v is None else int(round(after_v - before_v))
    out["counters"] = counters
    late = histogram(a, "chronos_fire_lateness_seconds")
    out["node_lateness"] = histogram_summary(late, histogram(b, "chronos_fire_lateness_seconds"))
    return out


def run_load_scenario(ctx: Context, scenario: Scenario, ceiling: float | None) -> dict[str, Any]:
    assert scenario.workload is not None
    w = scenario.workload
    stack = ctx.stack
    sdir = ctx.out / scenario.name
    sdir.mkdir(parents=True, exist_ok=True)
    rate = _offered_rate(scenario, ceiling)
    rec: dict[str, Any] = {
        **scenario.as_dict(),
        "status": "running",
        "offered_rate": rate,
        "load": w.describe(rate),
    }
    tag = f"[{scenario.name}]"
    stack.fresh_broker()
    topics = stack.topics(scenario.name)
    stack.reset_table()
    if scenario.preload_rows:
        _say(f"{tag} pre-loading {scenario.preload_rows:,} far-future rows")
        rec["preload"] = stack.preload(scenario.preload_rows)
        _say(
            f"{tag} pre-loaded in {rec['preload']['seconds']} s "
            f"({rec['preload']['table_mb']:,.0f} MB)"
        )
    if scenario.kind == "relay":
        nodes = [stack.start_relay(topics, sdir)]
    else:
        nodes = stack.start_nodes(scenario.nodes, topics, sdir)
        stack.wait_ready(nodes, topics)
    rec["node_pids"] = [n.pid for n in nodes]
    advance = int(nodes[0].settings.timing_advance_ms)
    _say(
        f"{tag} {len(nodes)} node(s) ready (pid {', '.join(str(n.pid) for n in nodes)}); "
        f"sending {w.describe(rate)}"
    )
    events = sdir / "events"
    harness_argv = [
        "-m",
        "loadtest",
        "run",
        "--bootstrap",
        stack.bootstrap,
        "--input-topic",
        topics.input,
        "--output-topic",
        topics.output,
        "--dead-letter-topic",
        topics.dead_letter,
        *w.harness_args(rate),
        "--timing-advance-ms",
        str(advance),
        "--seed",
        "1",
        "--out",
        str(events),
    ]
    rec["harness_command"] = "python " + shlex.join(harness_argv)
    metrics_before = [n.metrics_text() for n in nodes]
    cpu_before = cpu_snapshot(stack, nodes)
    load_before = os.getloadavg()
    sampler = Sampler(stack.url, nodes, stall_dir=sdir)
    sampler.start()
    profiler: Profiler | None = None
    if scenario.name in ctx.profile or scenario.kind in ctx.profile:
        profiler = Profiler(
            nodes[0].pid, _profile_start_s(w) + 1.5, ctx.profile_seconds, sdir / "profile-node0.raw"
        )
        profiler.start()
    started = time.monotonic()
    try:
        harness = launch(
            harness_argv,
            log_path=sdir / "harness.log",
            env=_clean_env(),
            death_signal=signal.SIGTERM,
        )
        code = _wait_child(harness, f"the load of {scenario.name}")
    finally:
        elapsed = time.monotonic() - started
        cpu_after = cpu_snapshot(stack, nodes)
        metrics_after = [n.metrics_text() for n in nodes]
        hwm = {n.index: hwm_kb(n.pid) for n in nodes}
        if profiler is not None:
            profiler.stop()
        sampler.stop()
        exit_codes = stack.stop_nodes()
    rec["harness"] = {"returncode": code, "elapsed_s": round(elapsed, 1)}
    rec["loadavg"] = {
        "start": [round(x, 2) for x in load_before],
        "end": [round(x, 2) for x in os.getloadavg()],
    }
    rec["cpu"] = cpu_delta(cpu_before, cpu_after)
    for i, (first, text) in enumerate(zip(metrics_before, metrics_after, strict=True)):
        (sdir / f"metrics-before-node{i}.txt").write_text(first)
        (sdir / f"metrics-node{i}.txt").write_text(text)
    nm = node_metrics(metrics_before, metrics_after, elapsed)
    rec["claim"] = nm["claim"]
    rec["statements"] = nm["statements"]
    rec["node_counters"] = nm["counters"]
    rec["node_lateness"] = nm["node_lateness"]
    rec["nodes_stats"] = []
    for n in nodes:
        peak = max(sampler.rss_max_kb.get(n.index, 0), hwm.get(n.index) or 0)
        rec["nodes_stats"].append(
            {
                "index": n.index,
                "pid": n.pid,
                "rss_max_mb": round(peak / 1024, 1),
                "rss_sampled_max_mb": round(sampler.rss_max_kb.get(n.index, 0) / 1024, 1),
                "cpu_s": rec["cpu"]["per_node_s"].get(str(n.index)),
                "exit_code": exit_codes.get(n.index),
            }
        )
    rec["rss_max_mb"] = max((s["rss_max_mb"] for s in rec["nodes_stats"]), default=None)
    (sdir / "samples.json").write_text(json.dumps(sampler.samples) + "\n")
    if sampler.stalls:
        rec["stalls"] = sampler.stalls
        _say(f"{tag} node stalled: see {', '.join(s['file'] for s in sampler.stalls)}")
    if profiler is not None:
        rec["profile"] = _finish_profile(profiler, sdir)
    if code != 0:
        raise RuntimeError(f"the load generator exited with {code}; see {sdir / 'harness.log'}")

    _say(f"{tag} load done in {elapsed:.0f} s; analysing")
    analyze_argv = [
        "-m",
        "loadtest",
        "analyze",
        str(events),
        "--out",
        str(sdir),
        "--driver-memory",
        ctx.analyze_memory,
    ]
    analysis = launch(
        analyze_argv, log_path=sdir / "analyze.log", env=_clean_env(), death_signal=signal.SIGTERM
    )
    acode = _wait_child(analysis, f"the analysis of {scenario.name}")
    if acode != 0:
        raise RuntimeError(f"the analysis exited with {acode}; see {sdir / 'analyze.log'}")
    summary = json.loads((sdir / "summary.json").read_text())
    run = json.loads((events / "run.json").read_text())
    fill_from_summary(rec, scenario, summary, run, sampler.samples, rate)
    lost = int(rec["summary"]["counts"].get("lost") or 0)
    if lost and not run.get("consumer", {}).get("foreign_records"):
        rec["output_gaps"] = _received_gaps(events / "received.parquet")
    if lost:
        rec["loss_location"] = locate_loss(
            lost, stack.sql, str(run.get("run_id")), rec.get("output_gaps")
        ).as_dict()
    rec["files"] = _files(scenario.name, sdir)
    _plot_stack(sdir / "stack.png", sampler.samples, run, scenario)
    if (sdir / "stack.png").exists():
        rec["files"]["stack timeline"] = f"{scenario.name}/stack.png"
    rec["status"] = "ok"
    return rec


def fill_from_summary(
    rec: dict[str, Any],
    scenario: Scenario,
    summary: dict[str, Any],
    run: dict[str, Any],
    samples: Sequence[dict[str, Any]],
    rate: float,
) -> None:
    """The figures derived from the analysis and the samples (pure: unit-tested)."""
    assert scenario.workload is not None
    w = scenario.workload
    rec["summary"] = _summary_subset(summary)
    timeline = summary.get("throughput", {}).get("timeline", [])
    window = w.steady_window_s()
    rec["steady"] = steady_rates(timeline, window)
    producer = run.get("producer", {})
    start_ms = int(run.get("start_ms") or producer.get("start_ms") or 0)
    end_ms = int(producer.get("end_ms") or start_ms + w.send_seconds * 1000)
    rec["send"] = {
        "start_ms": start_ms,
        "end_ms": end_ms,
        "achieved_rate": producer.get("achieved_rate"),
        "max_lag_ms": producer.get("max_lag_ms"),
        "behind_messages": producer.get("behind_messages"),
    }
    if not w.is_burst():
        _, mean_delay, _ = w.delay_bounds_s()
        rec["backlog"] = backlog_verdict(
            samples,
            send_start_ms=start_ms,
            send_end_ms=end_ms,
            rate=rate,
            mean_delay_s=mean_delay,
            window=window,
            timeline=timeline,
        )
    else:
        win = summary.get("window", {})
        first, last = win.get("first_fired_ms"), win.get("last_fired_ms")
        fired = summary.get("counts", {}).get("fired_distinct", 0)
        seconds = (last - first) / 1000 if first is not None and last is not None else None
        rec["drain"] = {
            "count": fired,
            "first_fired_ms": first,
            "last_fired_ms": last,
            "seconds": None if seconds is None else round(seconds, 3),
            "rate_per_s": round(fired / seconds, 1) if seconds else None,
        }
        target = 0.999 * w.messages
        stored = next((s for s in samples if (r := _rows(s)) is not None and r >= target), None)
        after = None if stored is None else round((stored["t_ms"] - start_ms) / 1000, 1)
        rec["intake"] = {
            "stored_after_s": after,
            "rate_per_s": round(w.messages / after, 1) if after else None,
        }


def _files(name: str, sdir: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    for label, filename in (
        ("report", "report.html"),
        ("summary", "summary.json"),
        ("lateness CDF", "lateness_cdf.png"),
        ("lateness histogram", "lateness_hist.png"),
        ("throughput", "throughput.png"),
        ("samples", "samples.json"),
        ("profile", "profile-node0.txt"),
        ("load generator log", "harness.log"),
    ):
        if (sdir / filename).exists():
            files[label] = f"{name}/{filename}"
    if (sdir / "relay.log").exists():
        files["relay log"] = f"{name}/relay.log"
    for log in sorted(sdir.glob("node-*.log")):
        files[log.stem + " log"] = f"{name}/{log.name}"
    for stall in sorted(sdir.glob("stall-node*.txt")):
        files[stall.stem] = f"{name}/{stall.name}"
    return files


def _finish_profile(profiler: Profiler, sdir: Path) -> dict[str, Any] | None:
    raw = profiler.raw_path
    if not raw.exists():
        return {
            "error": profiler.error or "no profile written",
            "samples": 0,
            "self": [],
            "total": [],
        }
    prof = aggregate_profile(raw.read_text(errors="replace"))
    (sdir / "profile-node0.txt").write_text(profile_text(prof))
    return prof


def _plot_stack(
    path: Path, samples: Sequence[dict[str, Any]], run: dict[str, Any], scenario: Scenario
) -> None:
    if not samples:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    start = int(run.get("start_ms") or samples[0]["t_ms"])
    end = run.get("producer", {}).get("end_ms")
    xs = [(s["t_ms"] - start) / 1000 for s in samples]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    for key, label in (
        ("waiting", "waiting rows"),
        ("claimed", "claimed rows"),
        ("overdue", "overdue rows"),
        ("consumer_lag", "consumer lag"),
    ):
        ys = [s.get(key) for s in samples]
        if any(y is not None for y in ys):
            ax.plot(xs, [float("nan") if y is None else y for y in ys], label=label)
    ax.set_xlabel("seconds since the first send")
    ax.set_ylabel("messages")
    if end:
        ax.axvline((int(end) - start) / 1000, color="grey", linestyle="--", linewidth=1)
    ax2 = ax.twinx()
    for i in range(scenario.nodes):
        ys = [s.get(f"rss_mb_{i}") for s in samples]
        ax2.plot(
            xs,
            [float("nan") if y is None else y for y in ys],
            linestyle=":",
            label=f"node {i} RSS MB",
        )
    ax2.set_ylabel("RSS MB")
    handles = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    ax.legend(handles, labels, loc="upper left", fontsize="small")
    ax.set_title(f"{scenario.name}: table, lag and node memory (dashed: end of sending)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ============================================================================ driver


def _machine_facts() -> dict[str, Any]:
    model = None
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kb = parse_status_kb(_read("/proc/meminfo") or "", "MemTotal")
    return {
        "cores": os.cpu_count(),
        "cpu_model": model,
        "memory_gb": None if mem_kb is None else round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }


def _commit() -> str | None:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        return head.strip() + (" (with uncommitted changes)" if dirty.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _command_line(argv: Sequence[str]) -> str:
    python = sys.executable
    with contextlib.suppress(ValueError):
        rel = os.path.relpath(python, Path.cwd())
        if not rel.startswith(".."):
            python = rel
    return f"{python} -m loadtest {shlex.join(argv)}"


def write_outputs(out: Path, bench: dict[str, Any]) -> None:
    bench["targets"] = evaluate(bench)
    cap, source = capacity(bench)
    ceiling = ceiling_rate(bench)
    bench["headline"] = {
        "ceiling_msg_per_s": ceiling,
        "sustained_msg_per_s": cap,
        "sustained_source": source,
        "ratio_to_ceiling": round(cap / ceiling, 3) if cap and ceiling else None,
        "targets_passed": sum(1 for r in bench["targets"] if r["pass"] is True),
        "targets_failed": sum(1 for r in bench["targets"] if r["pass"] is False),
    }
    (out / "bench.json").write_text(json.dumps(bench, indent=2, default=str) + "\n")
    (out / "BENCHMARK.md").write_text(render_markdown(bench))


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_bench(args: argparse.Namespace) -> int:
    names = sc.parse_names(args.scenarios)
    runs = sc.plan(names, quick=args.quick)
    out = Path(args.out or DEFAULT_RESULTS / datetime.now().strftime("bench-%Y%m%d-%H%M%S"))
    out = out.absolute()
    if out.exists() and any(out.iterdir()):
        raise RuntimeError(f"output directory {out} is not empty")
    out.mkdir(parents=True, exist_ok=True)
    temp_data = args.data_dir is None
    if temp_data:
        data_dir = Path(tempfile.mkdtemp(prefix="chronos-bench-"))
        data_dir.chmod(0o755)  # Postgres runs as its own system user when we are root
    else:
        data_dir = Path(args.data_dir).absolute()
        if data_dir.exists() and any(data_dir.iterdir()):
            raise RuntimeError(f"data directory {data_dir} is not empty")
        data_dir.mkdir(parents=True, exist_ok=True)
    node_env = dict(args.node_env or [])
    bad = [k for k in node_env if not k.startswith("CHRONOS_")]
    if bad:
        raise RuntimeError(f"--node-env takes CHRONOS_* variables, not {bad[0]}")
    logs = out / "stack"
    logs.mkdir()
    bench: dict[str, Any] = {
        "command": _command_line(getattr(args, "argv", None) or sys.argv[1:]),
        "quick": bool(args.quick),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "scenario_plan": [s.name for s in runs],
        "machine": _machine_facts(),
        "scenarios": [],
    }
    bench["machine"]["commit"] = _commit()
    with contextlib.suppress(Exception):
        from chronos import __version__

        bench["machine"]["chronos"] = __version__
    started = time.monotonic()
    stack = Stack(data_dir, logs, args.partitions, node_env)
    ctx = Context(out, stack, args.quick, set(args.profile or []), args.profile_seconds)
    failures = 0
    interrupted = False
    _say(f"results in {out}")
    with _sigterm_interrupts():
        try:
            _say(f"starting Postgres (durable) and the broker in {data_dir}")
            stack.start()
            bench["machine"]["postgres"] = stack.postgres_version()
            settings = stack.node_settings(Topics("i", "o", "d", "g"))
            bench["stack"] = {
                "postgres_durable": True,
                "partitions": args.partitions,
                "node_env": node_env,
                "node_settings_summary": (
                    f"advance {settings.timing_advance_ms} ms, lookahead {settings.lookahead_ms}"
                    f" ms, poll {settings.poll_interval_ms} ms, batches "
                    f"{settings.consume_batch_size}/{settings.claim_batch_size}, max in flight "
                    f"{settings.max_in_flight}"
                ),
            }
            ceiling: float | None = None
            for scenario in runs:
                try:
                    if scenario.kind == "ceiling":
                        rec = run_ceiling_scenario(ctx, scenario)
                        if scenario.name == "ceiling":
                            ceiling = rec["result"]["ceiling_msg_per_s"]
                    else:
                        rec = run_load_scenario(ctx, scenario, ceiling)
                    if scenario.kind != "ceiling":
                        _say(f"[{scenario.name}] {_one_line(rec)}")
                except (KeyboardInterrupt, Interrupted):
                    raise
                except Exception as exc:  # noqa: BLE001 - record it, go on with the next
                    failures += 1
                    rec = {**scenario.as_dict(), "status": "failed", "error": str(exc)[:500]}
                    _say(f"[{scenario.name}] FAILED: {exc}")
                    with contextlib.suppress(Exception):
                        stack.stop_nodes()
                bench["scenarios"].append(rec)
                write_outputs(out, bench)
        except (KeyboardInterrupt, Interrupted):
            interrupted = True
            _say("interrupted; stopping everything")
        finally:
            stack.stop()
            if temp_data and not args.keep_data:
                shutil.rmtree(data_dir, ignore_errors=True)
            bench["ended"] = datetime.now(UTC).isoformat(timespec="seconds")
            bench["elapsed_s"] = round(time.monotonic() - started, 1)
            bench["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
            bench["interrupted"] = interrupted
            write_outputs(out, bench)
    _print_table(bench)
    print(out / "BENCHMARK.md")
    if interrupted:
        return 130
    return 1 if failures else 0


def _one_line(rec: dict[str, Any]) -> str:
    if rec.get("kind") == "ceiling":
        return f"{rec['result']['ceiling_msg_per_s']:,.0f} msg/s"
    late = _get(rec, "summary", "lateness_ms") or {}
    counts = _get(rec, "summary", "counts") or {}
    parts = [
        f"sent {_fmt(counts.get('sent'))}, fired {_fmt(counts.get('fired_distinct'))}, "
        f"lost {_fmt(counts.get('lost'))}, late after the window "
        f"{_fmt(_get(rec, 'summary', 'delivery', 'late_after_window'))}",
        f"lateness p99 {_fmt(late.get('p99'))} p99.9 {_fmt(late.get('p99_9'))} ms",
    ]
    if rec.get("steady"):
        parts.append(f"steady fired {_fmt(rec['steady']['fired_per_s'])}/s")
    if rec.get("drain"):
        parts.append(f"drain {_fmt(rec['drain']['rate_per_s'])}/s")
    parts.append(f"claim mean {_fmt(_get(rec, 'claim', 'mean_ms'), 2)} ms")
    parts.append(f"RSS max {_fmt(rec.get('rss_max_mb'), 0)} MB")
    return "; ".join(parts)


def _print_table(bench: dict[str, Any]) -> None:
    print("", file=sys.stderr)
    for row in bench.get("targets", []):
        mark = {True: "pass", False: "FAIL", None: "  - "}[row["pass"]]
        print(
            f"  {mark}  {row['scenario']:<12} {row['target']}: {row['measured']}", file=sys.stderr
        )


# ============================================================================ command line


def _env_pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value


def _scenario_list(text: str) -> str:
    try:
        sc.parse_names(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _profile_list(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenarios",
        type=_scenario_list,
        default=None,
        help=f"comma-separated, from {','.join(sc.SCENARIO_NAMES)} (default "
        f"{','.join(sc.DEFAULT_SCENARIOS)}); the ceiling always runs first",
    )
    parser.add_argument(
        "--quick", action="store_true", help="shrunken scenarios: a smoke test of a few minutes"
    )
    parser.add_argument(
        "--out", type=Path, help="results directory (default loadtest/results/bench-<timestamp>)"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="Postgres cluster and broker data (default: a new temporary directory, removed "
        "at the end)",
    )
    parser.add_argument("--keep-data", action="store_true", help="keep the temporary data dir")
    parser.add_argument("--partitions", type=int, default=6, help="partitions per topic")
    parser.add_argument(
        "--node-env",
        action="append",
        type=_env_pair,
        metavar="CHRONOS_NAME=VALUE",
        help="a setting for every node (repeatable), e.g. CHRONOS_CLAIM_BATCH_SIZE=5000",
    )
    parser.add_argument(
        "--profile",
        type=_profile_list,
        default=[],
        metavar="SCENARIOS",
        help="profile node 0 with py-spy during these scenarios (comma-separated)",
    )
    parser.add_argument(
        "--profile-seconds", type=float, default=20.0, help="length of each profile"
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="DIR",
        help="run nothing: re-evaluate the targets of an earlier run's DIR/bench.json and "
        "rewrite its bench.json and BENCHMARK.md",
    )


def render(out: Path) -> int:
    """Re-evaluate an existing results directory (after a change to the evaluation)."""
    bench = json.loads((out / "bench.json").read_text())
    for rec in bench.get("scenarios", []):
        sdir = out / rec.get("name", "")
        lost = _get(rec, "summary", "counts", "lost")
        received = sdir / "events" / "received.parquet"
        if lost and "output_gaps" not in rec and received.exists():
            rec["output_gaps"] = _received_gaps(received)
        after = sorted(sdir.glob("metrics-node*.txt"))
        before = [sdir / p.name.replace("metrics-", "metrics-before-") for p in after]
        if after and rec.get("cpu"):
            complete = all(p.exists() for p in before)
            nm = node_metrics(
                [_read(str(p)) or "" for p in before] if complete else [""] * len(after),
                [_read(str(p)) or "" for p in after],
                float(rec["cpu"].get("wall_s") or 0) or 1.0,
            )
            # Without the scrapes taken before the load (older runs) only the lateness
            # histogram is recomputed: the nodes fired nothing before the load, but they did
            # claim and count.
            rec["node_lateness"] = nm["node_lateness"]
            if complete:
                rec.update(claim=nm["claim"], statements=nm["statements"])
                rec["node_counters"] = nm["counters"]
    write_outputs(out, bench)
    _print_table(bench)
    print(out / "BENCHMARK.md")
    return 0


def main(args: argparse.Namespace) -> int:
    if getattr(args, "render", None) is not None:
        return render(Path(args.render))
    return run_bench(args)
