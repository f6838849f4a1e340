"""A Prometheus histogram observed a batch at a time.

``prometheus_client.Histogram.observe`` costs a few microseconds per value (a lock, a Python
loop over the buckets, a lock per counter); the firing loop observes one lateness per fired
message, hundreds of thousands a minute. ``BatchHistogram`` keeps each series' bucket counts
itself and adds a whole batch in one pass (``bisect`` mapped over the values, counted by
``collections.Counter``), under one lock per batch. It exposes exactly the family a
``prometheus_client.Histogram`` of the same name, labels and buckets would: ``_bucket``
(cumulative, the ``le`` label formatted alike), ``_count``, ``_sum`` (left out when a bucket
bound is negative, as ``prometheus_client`` does) and ``_created`` (unless
``PROMETHEUS_DISABLE_CREATED_SERIES`` is set), so dashboards, alerts and the intake process's
merged samples (``chronos.observability.relay``) see no difference.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import partial

from prometheus_client import Counter as PrometheusCounter
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry
from prometheus_client.utils import INF, floatToGoString

# How prometheus_client writes a bucket's ``le`` label (typed here: the library's is not).
_go_string: Callable[[float], str] = floatToGoString

# A counter of no registry, asked whether prometheus_client writes ``_created`` samples now.
_CREATED_PROBE = PrometheusCounter(
    "chronos_created_probe", "asks for _created samples", registry=None
)


def created_series_enabled() -> bool:
    """Whether prometheus_client writes ``_created`` samples now: off when
    PROMETHEUS_DISABLE_CREATED_SERIES is set or after ``disable_created_metrics()``. The library
    has a switch but no public getter, so a counter of its own answers (its samples)."""
    return any(
        sample.name.endswith("_created")
        for metric in _CREATED_PROBE.collect()
        for sample in metric.samples
    )


class _Series:
    __slots__ = ("counts", "created", "sum")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets  # per bucket, not cumulative
        self.sum = 0.0
        self.created = time.time()


class BatchHistogram(Collector):
    """A histogram family whose values are added in batches: ``observe_many``."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds):
            raise ValueError("buckets not in sorted order")
        if bounds[-1] != INF:
            bounds.append(INF)
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.upper_bounds = tuple(bounds)
        self._le = tuple(_go_string(b) for b in bounds)
        self._index = partial(bisect_left, self.upper_bounds)  # the first bound >= the value
        self._lock = threading.Lock()
        self._series: dict[tuple[str, ...], _Series] = {}
        if not self.labelnames:
            self._series[()] = _Series(len(bounds))
        if registry is not None:
            registry.register(self)

    def observe_many(self, values: Sequence[float], labelvalues: Sequence[str] = ()) -> None:
        """Observe every value of ``values`` in the series of ``labelvalues``."""
        if not values:
            return
        key = tuple(labelvalues)
        if len(key) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {key}")
        hits = Counter(map(self._index, values))
        total = sum(values)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Series(len(self.upper_bounds))
            counts = series.counts
            for index, n in hits.items():
                counts[index] += n
            series.sum += total

    def remove(self, *labelvalues: str) -> None:
        """Remove a labelled series (nothing happens if it was never observed, as with
        prometheus_client)."""
        with self._lock:
            self._series.pop(tuple(labelvalues), None)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            series = [(k, list(s.counts), s.sum, s.created) for k, s in self._series.items()]
        family = Metric(self.name, self.documentation, "histogram")
        with_sum = self.upper_bounds[0] >= 0
        with_created = created_series_enabled()
        for key, counts, total, created in series:
            labels = dict(zip(self.labelnames, key, strict=True))
            acc = 0.0
            for le, n in zip(self._le, counts, strict=True):
                acc += n
                family.add_sample(self.name + "_bucket", {**labels, "le": le}, acc)
            family.add_sample(self.name + "_count", labels, acc)
            if with_sum:
                family.add_sample(self.name + "_sum", labels, total)
            if with_created:
                family.add_sample(self.name + "_created", labels, created)
        yield family

    def describe(self) -> Iterable[Metric]:
        yield Metric(self.name, self.documentation, "histogram")
