"""The nodes' ``/metrics`` as the benchmark reads them: samples, cumulative histograms, their
quantiles and deltas between two scrapes."""

from __future__ import annotations

import math

import pytest

from loadtest.bench import promtext


def _exposition() -> str:
    """A real exposition from prometheus_client, with Chronos's buckets."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    registry = CollectorRegistry()
    h = Histogram(
        "chronos_statement_duration_seconds",
        "Latency of database statements",
        ["statement"],
        buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        registry=registry,
    )
    for _ in range(98):
        h.labels("claim").observe(0.002)  # bucket (0.001, 0.0025]
    h.labels("claim").observe(0.02)  # (0.01, 0.025]
    h.labels("claim").observe(0.3)  # (0.25, 0.5]
    h.labels("delete").observe(1.0)
    c = Counter("chronos_fired_messages", "fired", registry=registry)
    c.inc(42)
    return generate_latest(registry).decode()


def test_parse_prometheus_and_histogram() -> None:
    samples = promtext.parse_prometheus(_exposition())
    assert promtext.metric_total(samples, "chronos_fired_messages_total") == 42
    assert promtext.metric_total(samples, "chronos_nope") is None
    claim = promtext.histogram(samples, "chronos_statement_duration_seconds", statement="claim")
    assert claim is not None
    assert claim.count == 100 and claim.sum == pytest.approx(98 * 0.002 + 0.32)
    assert claim.mean == pytest.approx((98 * 0.002 + 0.32) / 100)
    assert math.isinf(claim.bounds[-1]) and claim.cumulative[-1] == 100
    # p50: rank 50 of 98 in (0.001, 0.0025] -> 0.001 + 0.0015 * 50/98.
    assert claim.quantile(0.5) == pytest.approx(0.001 + 0.0015 * 50 / 98)
    # p99: rank 99 is the one observation in (0.01, 0.025] -> its upper bound.
    assert claim.quantile(0.99) == pytest.approx(0.025)
    assert claim.quantile(1.0) == pytest.approx(0.5)
    delete = promtext.histogram(samples, "chronos_statement_duration_seconds", statement="delete")
    assert delete is not None and delete.count == 1


def test_histogram_delta_and_nodes_summed() -> None:
    before = promtext.parse_prometheus(_exposition())
    text = _exposition()
    # A second node's scrape of the same metrics: summing doubles every bucket.
    both = promtext.parse_prometheus(text) + promtext.parse_prometheus(text)
    name = "chronos_statement_duration_seconds"
    summed = promtext.histogram(both, name, statement="claim")
    assert summed is not None and summed.count == 200
    delta = summed.minus(promtext.histogram(before, name, statement="claim"))
    assert delta.count == 100 and delta.mean == pytest.approx((98 * 0.002 + 0.32) / 100)
    summary = promtext.histogram_summary(
        summed, promtext.histogram(before, name, statement="claim"), 10
    )
    assert summary.count == 100 and summary.per_s == 10
    assert summary.mean_ms == pytest.approx(5.16, abs=1e-3)
    assert summary.p99_ms == pytest.approx(25.0)
    assert promtext.histogram_summary(None, None).mean_ms is None


def test_quantile_in_the_inf_bucket_and_empty() -> None:
    h = promtext.Histogram([0.1, 1.0, math.inf], [0, 1, 10], 50.0, 10)
    assert h.quantile(0.5) == 1.0  # beyond the last finite bound: that bound
    assert promtext.Histogram([0.1, math.inf], [0, 0], 0, 0).quantile(0.99) is None


def test_node_metrics_between_scrapes() -> None:
    before, after = _exposition(), _exposition() + "chronos_fired_messages_total 50.0\n"
    nm = promtext.node_metrics([before], [after], 10.0)
    assert nm.statements["claim"].count == 0
    assert nm.counters["fired"] == 50
    assert nm.counters["enqueued"] is None


def test_parse_labels_with_escapes() -> None:
    text = 'm{a="x\\"y",b="1,2"} 3\n# HELP m x\nbroken line\n'
    (sample,) = promtext.parse_prometheus(text)
    assert sample.labels == {"a": 'x"y', "b": "1,2"} and sample.value == 3


def test_histogram_with_negative_buckets() -> None:
    """Chronos's lateness histogram has negative buckets; prometheus_client then exposes no
    _sum, so there is no mean, and the first bucket is a point, not a range from 0."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    registry = CollectorRegistry()
    h = Histogram(
        "chronos_fire_lateness_seconds",
        "x",
        buckets=(-0.1, -0.05, -0.025, -0.01, -0.005, 0, 0.005, 0.01, 0.025, 0.05, 0.1),
        registry=registry,
    )
    for _ in range(90):
        h.observe(-0.04)  # (-0.05, -0.025]
    for _ in range(9):
        h.observe(0.007)  # (0.005, 0.01]
    h.observe(-0.2)  # (-inf, -0.1]
    samples = promtext.parse_prometheus(generate_latest(registry).decode())
    late = promtext.histogram(samples, "chronos_fire_lateness_seconds")
    assert late is not None and late.count == 100
    if late.sum is None:
        assert late.mean is None
    assert late.quantile(0.005) == -0.1  # in the first bucket: its bound
    assert late.quantile(0.5) == pytest.approx(-0.05 + 0.025 * (50 - 1) / 90)
    assert late.quantile(0.99) == pytest.approx(0.005 + 0.005 * 8 / 9)
    summary = promtext.histogram_summary(late, None)
    assert summary.p99_ms == pytest.approx(9.444, abs=1e-3)
