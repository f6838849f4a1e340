"""Per-tenant telemetry (chronos.observability.tenants): the bounded label rule, and the
per-tenant fired counters and lateness histograms by label."""

from __future__ import annotations

import uuid

from prometheus_client import REGISTRY

from chronos.observability.tenants import OTHER, TenantLabels, TenantMetrics, tenant_label


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


# ------------------------------------------------------------------------ the label rule


def test_free_slots_are_taken_at_once_then_the_rest_is_other() -> None:
    labels = TenantLabels(2, monotonic=Clock())
    assert [labels.label(t) for t in ("a", "b", "c", "a", "c")] == ["a", "b", OTHER, "a", OTHER]
    assert labels.labelled == {"a", "b"}


def test_labels_change_only_at_the_end_of_a_window_busiest_replacing_quietest() -> None:
    clock, evicted = Clock(), list[str]()
    labels = TenantLabels(2, window_s=600, monotonic=clock, on_evict=evicted.append)
    for tenant, n in (("a", 1), ("b", 50), ("c", 100), ("d", 3)):
        for _ in range(n):
            labels.label(tenant)
    clock.t = 599
    assert labels.roll() == [] and labels.labelled == {"a", "b"}  # the window is not over
    clock.t = 600
    assert labels.roll() == ["a"]  # c (100) replaces a (1); d (3) is not in the top 2
    assert labels.labelled == {"b", "c"} and evicted == ["a"]
    assert labels.label("c") == "c" and labels.label("a") == OTHER


def test_a_stable_busy_set_never_churns_and_a_quiet_newcomer_waits() -> None:
    clock = Clock()
    labels = TenantLabels(2, window_s=10, monotonic=clock)
    for window in range(1, 4):
        for tenant, n in (("a", 10), ("b", 10), ("c", 10)):  # c ties: no reason to churn
            for _ in range(n):
                labels.label(tenant)
        clock.t = 10 * window
        assert labels.roll() == []
    assert labels.labelled == {"a", "b"}


def test_the_counted_tenants_are_bounded() -> None:
    labels = TenantLabels(1, counted=100, monotonic=Clock())
    for i in range(10_000):
        labels.label(f"t{i}")
    assert len(labels.window) <= 100


def test_fired_messages_and_lateness_by_label() -> None:
    a, b, c = (f"fm-{uuid.uuid4()}" for _ in range(3))
    metrics = TenantMetrics(2, monotonic=Clock())
    metrics.observe_fired([(a, 0.01), (b, 2.0), (c, 0.5), (a, 0.02)])
    assert sample("chronos_tenant_fired_messages_total", tenant=a) == 2
    assert sample("chronos_tenant_fired_messages_total", tenant=b) == 1
    assert sample("chronos_tenant_fired_messages_total", tenant=c) == 0
    assert sample("chronos_tenant_fire_lateness_seconds_count", tenant=b) == 1
    assert sample("chronos_tenant_fire_lateness_seconds_bucket", tenant=b, le="1.0") == 0
    assert sample("chronos_tenant_fire_lateness_seconds_bucket", tenant=b, le="2.5") == 1


def test_an_evicted_tenant_loses_its_series() -> None:
    clock = Clock()
    quiet, busy = (f"ev-{uuid.uuid4()}" for _ in range(2))
    metrics = TenantMetrics(1, window_s=60, monotonic=clock)
    metrics.observe_fired([(quiet, 0.0)] + [(busy, 0.0)] * 5)
    assert sample("chronos_tenant_fired_messages_total", tenant=quiet) == 1
    clock.t = 60
    metrics.observe_fired([(busy, 0.0)])
    assert (
        REGISTRY.get_sample_value("chronos_tenant_fired_messages_total", {"tenant": quiet}) is None
    )
    assert sample("chronos_tenant_fired_messages_total", tenant=busy) == 1


def test_a_tenant_named_like_the_overflow_label_never_merges_with_it() -> None:
    """A tenant called ``_other`` (or anything starting with ``_``) gets its own series, under
    its name with one more ``_``; the overflow series stays the unlabelled tenants' alone."""
    metrics = TenantMetrics(1, monotonic=Clock())
    before = sample("chronos_tenant_fired_messages_total", tenant=OTHER)
    metrics.observe_fired([(OTHER, 0.0), (OTHER, 0.0), ("late-comer", 0.0)])
    assert sample("chronos_tenant_fired_messages_total", tenant="__other") == 2
    assert sample("chronos_tenant_fired_messages_total", tenant=OTHER) == before + 1
    assert tenant_label("__other") == "___other" and tenant_label("acme") == "acme"
