"""Prometheus text from the nodes' ``/metrics``: samples, cumulative histograms and the
figures of a node between two scrapes (statement latencies, batch sizes, counters)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from prometheus_client.parser import text_string_to_metric_families

from loadtest.bench.results.node import NodeMetrics, StatementStats


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def parse_prometheus(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition, read by ``prometheus_client``'s parser.

    A line the parser rejects spoils the whole text for it, so then the text is read again line
    by line and the bad lines are skipped (as a scrape cut short would leave one).
    """
    try:
        return _parse(text)
    except ValueError:
        out: list[Sample] = []
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                out += _parse(line)
        return out


def _parse(text: str) -> list[Sample]:
    return [
        Sample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


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
) -> StatementStats:
    """count, mean/p50/p99/max-bucket in milliseconds of the observations between two scrapes."""
    if after is None:
        return StatementStats(count=0, observed=False)
    h = after.minus(before)
    return StatementStats(
        count=round(h.count),
        mean_ms=_ms(h.mean),
        p50_ms=_ms(h.quantile(0.5)),
        p99_ms=_ms(h.quantile(0.99)),
        p99_9_ms=_ms(h.quantile(0.999)),
        per_s=round(h.count / seconds, 2) if seconds else None,
    )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


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


def node_metrics(before: Sequence[str], after: Sequence[str], seconds: float) -> NodeMetrics:
    """Statement latencies, batch sizes and counters between two scrapes of every node."""
    b = [s for text in before for s in parse_prometheus(text)]
    a = [s for text in after for s in parse_prometheus(text)]
    statements = {
        statement: _statement(a, b, statement, seconds)
        for statement in ("claim", "delete", "enqueue")
    }
    claim = replace(statements["claim"], rows_key="rows_per_claim")
    counters: dict[str, int | None] = {}
    for key, metric in NODE_COUNTERS.items():
        after_v = metric_total(a, metric)
        before_v = metric_total(b, metric) or 0.0
        counters[key] = None if after_v is None else round(after_v - before_v)
    late = histogram(a, "chronos_fire_lateness_seconds")
    node_lateness = histogram_summary(late, histogram(b, "chronos_fire_lateness_seconds"))
    return NodeMetrics(statements, claim, counters, node_lateness)


def _statement(
    after: Sequence[Sample], before: Sequence[Sample], statement: str, seconds: float
) -> StatementStats:
    """One statement's latency and, when the node exposes it, its rows per statement."""
    name = "chronos_statement_duration_seconds"
    stats = histogram_summary(
        histogram(after, name, statement=statement),
        histogram(before, name, statement=statement),
        seconds,
    )
    rows_after = histogram(after, "chronos_batch_size_messages", operation=statement)
    if rows_after is None:
        return stats
    rows = rows_after.minus(histogram(before, "chronos_batch_size_messages", operation=statement))
    mean = None if rows.mean is None else round(rows.mean, 1)
    return replace(stats, rows=mean, rows_key="rows_per_statement")
