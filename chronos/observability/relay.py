"""One ``/metrics`` for a node of two processes: the intake process's samples in the node's
exposition.

The intake process ships a snapshot of its ``chronos_*`` families (``snapshot``, plain JSON) with
every status message it sends the node (``chronos.intake.process``); the node's HTTP server
serves ``MergedRegistry``, which merges the latest snapshot into the node's own registry, family
by family, so that no family appears twice. Both processes declare every family
(``chronos.observability.metrics``), so a family may come from both sides:

* counters and histograms add up, sample by sample (each process counts its own events: the
  database errors of intake's statements and of firing's); a ``_created`` sample keeps the
  earlier time;
* gauges add up too (each side reports its own part and leaves the rest at 0: the intake process
  its assigned partitions and consumer lag, the node its in-flight messages and backlog), except
  those in ``GAUGE_MAX`` that each process measures for itself and whose node-wide value is the
  larger one.

Only ``chronos_`` families are shipped: the ``process_*`` and ``python_*`` families stay the
node process's own. So that a dashboard still sees the whole node, each process also reports its
CPU time and resident memory as ``chronos_process_cpu_seconds_total`` and
``chronos_process_resident_memory_bytes`` labelled ``process="node"`` or ``process="intake"``
(``expose_process``): summed over ``process``, they cover every process of the node.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from prometheus_client import ProcessCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

PREFIX = "chronos_"
# Gauges whose node-wide value is the larger of the two processes' values.
GAUGE_MAX = frozenset({"chronos_running_statement_age_seconds"})
_ADDING = frozenset({"counter", "histogram", "gaugehistogram", "summary", "gauge"})
# The families of prometheus_client's ProcessCollector that each process reports by role.
_PROCESS_FAMILIES = frozenset({"process_cpu_seconds", "process_resident_memory_bytes"})

Snapshot = list[dict[str, Any]]


def snapshot(registry: CollectorRegistry = REGISTRY, prefix: str = PREFIX) -> Snapshot:
    """The families of ``registry`` named ``prefix...``, as JSON-ready data."""
    return [
        {
            "name": family.name,
            "type": family.type,
            "help": family.documentation,
            "unit": family.unit,
            "samples": [[s.name, s.labels, s.value] for s in family.samples],
        }
        for family in registry.collect()
        if family.name.startswith(prefix)
    ]


def families(shipped: Snapshot) -> list[Metric]:
    """Metric families rebuilt from a snapshot."""
    rebuilt = []
    for data in shipped:
        family = Metric(data["name"], data["help"], data["type"], data["unit"])
        for name, labels, value in data["samples"]:
            family.add_sample(name, labels, float(value))
        rebuilt.append(family)
    return rebuilt


def merge(ours: Iterable[Metric], theirs: Iterable[Metric]) -> list[Metric]:
    """``ours`` and ``theirs`` as one list with each family name once (see the module doc)."""
    pending = {family.name: family for family in theirs}
    merged = []
    for family in ours:
        other = pending.pop(family.name, None)
        merged.append(family if other is None else _merge_family(family, other))
    merged.extend(pending.values())
    return merged


def _merge_family(ours: Metric, theirs: Metric) -> Metric:
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for sample in ours.samples:
        values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    for sample in theirs.samples:
        key = (sample.name, tuple(sorted(sample.labels.items())))
        if key not in values:
            values[key] = sample.value
        elif sample.name.endswith("_created"):
            values[key] = min(values[key], sample.value)
        elif ours.type == "gauge" and ours.name in GAUGE_MAX:
            values[key] = max(values[key], sample.value)
        elif ours.type in _ADDING:
            values[key] += sample.value
    family = Metric(ours.name, ours.documentation, ours.type, ours.unit)
    for (name, labels), value in values.items():
        family.add_sample(name, dict(labels), value)
    return family


class MergedRegistry(Collector):
    """A registry's families merged with the latest snapshot another process shipped
    (``prometheus_client.generate_latest`` takes it like a registry)."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        self.registry = registry
        self._shipped: list[Metric] = []

    def receive(self, shipped: Snapshot) -> None:
        self._shipped = families(shipped)  # one reference swap: collect() sees old or new

    def collect(self) -> Iterable[Metric]:
        return merge(self.registry.collect(), self._shipped)


class ProcessFamilies(Collector):
    """This process's CPU time and resident memory as ``chronos_process_*`` families labelled
    ``process=<role>`` (read by ``prometheus_client``'s ``ProcessCollector``)."""

    def __init__(self, role: str) -> None:
        self.role = role
        self._source = ProcessCollector(registry=None)

    def collect(self) -> Iterable[Metric]:
        for family in self._source.collect():
            if family.name not in _PROCESS_FAMILIES:
                continue
            ours = Metric(PREFIX + family.name, family.documentation, family.type, family.unit)
            for sample in family.samples:
                ours.add_sample(
                    PREFIX + sample.name, {**sample.labels, "process": self.role}, sample.value
                )
            yield ours

    def describe(self) -> Iterable[Metric]:
        return self.collect()  # the names, for the registry's check against duplicates


def expose_process(role: str, registry: CollectorRegistry = REGISTRY) -> None:
    """Have ``registry`` report this process's CPU time and memory as ``process=<role>``; once:
    a process has one role, a second call changes nothing."""
    with contextlib.suppress(ValueError):  # "Duplicated timeseries": reported already
        registry.register(ProcessFamilies(role))
