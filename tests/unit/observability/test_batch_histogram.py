"""``BatchHistogram`` exposes exactly what a ``prometheus_client.Histogram`` fed the same values
exposes: the same text, sample by sample (``_created`` aside, a time), labelled or not, with
negative bucket bounds or not, and through the intake process's metrics relay."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.metrics import disable_created_metrics, enable_created_metrics
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from chronos.observability.histogram import BatchHistogram
from chronos.observability.metrics import LATENESS_BUCKETS
from chronos.observability.relay import families, merge, snapshot

# prometheus_client's switch for the _created samples (typed here: the library's is not).
disable_created: Callable[[], None] = disable_created_metrics
enable_created: Callable[[], None] = enable_created_metrics
POSITIVE = (0.005, 0.01, 0.1, 1, 10)
# Bounds, values on and around them, far outside them; multiples of 1/1024 so that every sum is
# exact whatever the order of the additions.
EDGES = [-1e9, -0.25, -0.125, -0.0625, 0.0, 0.0, 1 / 1024, 0.5, 1.0, 2.5, 5.0, 300.0, 1e9]


def exposition(registry: CollectorRegistry) -> list[str]:
    """The text exposition, each ``_created`` value replaced by a mark (it is a time)."""
    lines = []
    for line in generate_latest(registry).decode().splitlines():
        name = line.split("{")[0].split(" ")[0]
        if name.endswith("_created"):
            line = line.rsplit(" ", 1)[0] + " <created>"
        lines.append(line)
    return lines


def pair(
    buckets: Sequence[float], labelnames: Sequence[str] = ()
) -> tuple[CollectorRegistry, Histogram, CollectorRegistry, BatchHistogram]:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("h_seconds", "doc", labelnames, buckets=buckets, registry=theirs)
    batch = BatchHistogram("h_seconds", "doc", labelnames, buckets=buckets, registry=ours)
    return theirs, reference, ours, batch


@pytest.mark.parametrize("buckets", [LATENESS_BUCKETS, POSITIVE], ids=["negative", "positive"])
def test_the_exposition_is_the_histograms(buckets: Sequence[float]) -> None:
    theirs, reference, ours, batch = pair(buckets)
    assert exposition(ours) == exposition(theirs)  # nothing observed yet
    rng = random.Random(7)
    batches = [EDGES, [], [float(b) for b in buckets]]
    batches += [[rng.randint(-200, 4000) / 1024 for _ in range(rng.randint(1, 300))]] * 5
    for values in batches:
        for value in values:
            reference.observe(value)
        batch.observe_many(values)
        assert exposition(ours) == exposition(theirs)
    text = "\n".join(exposition(ours))
    assert f"h_seconds_count {float(sum(map(len, batches)))}" in text  # every value counted
    assert ("h_seconds_sum" in text) == (min(buckets) >= 0)  # as prometheus_client has it


def test_labelled_series_and_their_removal() -> None:
    theirs, reference, ours, batch = pair(LATENESS_BUCKETS, ["tenant"])
    for tenant, values in (("a", [0.0, 0.5]), ("", [-0.0625]), ("_other", EDGES), ("a", [2.0])):
        for value in values:
            reference.labels(tenant).observe(value)
        batch.observe_many(values, (tenant,))
    assert exposition(ours) == exposition(theirs)
    reference.remove("a")
    batch.remove("a")
    assert exposition(ours) == exposition(theirs)
    assert 'tenant="a"' not in "\n".join(exposition(ours))
    reference.remove("never")  # a series never observed: nothing to remove
    batch.remove("never")
    assert exposition(ours) == exposition(theirs)
    with pytest.raises(ValueError, match="tenant"):
        batch.observe_many([1.0])  # the label is missing


def test_created_samples_follow_the_clients_switch() -> None:
    theirs, reference, ours, batch = pair(POSITIVE)
    reference.observe(1.0)
    batch.observe_many([1.0])
    disable_created()
    try:
        assert not any("_created" in line for line in exposition(ours))
        assert exposition(ours) == exposition(theirs)
    finally:
        enable_created()
    assert any(line.startswith("h_seconds_created") for line in exposition(ours))


def test_the_relay_adds_the_intake_processes_samples() -> None:
    # The node's and the intake process's families merged (chronos.observability.relay) are what one
    # histogram fed both sides' values would show.
    node, intake = CollectorRegistry(), CollectorRegistry()
    ours = BatchHistogram("chronos_h_seconds", "doc", buckets=POSITIVE, registry=node)
    other = BatchHistogram("chronos_h_seconds", "doc", buckets=POSITIVE, registry=intake)
    whole = CollectorRegistry()
    reference = Histogram("chronos_h_seconds", "doc", buckets=POSITIVE, registry=whole)
    ours.observe_many([0.0, 0.5, 20.0])
    other.observe_many([0.25, 1.0])
    for value in (0.0, 0.5, 20.0, 0.25, 1.0):
        reference.observe(value)
    merged = merge(node.collect(), families(snapshot(intake)))

    def samples(fams: Iterable[Metric]) -> dict[tuple[str, str], float]:
        return {
            (s.name, s.labels.get("le", "")): s.value
            for f in fams
            for s in f.samples
            if not s.name.endswith("_created")
        }

    assert samples(merged) == samples(whole.collect())
    text = generate_latest(whole).decode()
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    assert parsed["chronos_h_seconds"].type == "histogram"
    assert [f.type for f in merged] == ["histogram"]
