"""Per-tenant telemetry: the bounded label rule, the firing loop's per-tenant counters, the
leader's per-tenant overdue gauges, ``GET /admin/v1/tenants`` and ``chronos admin tenants``."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from prometheus_client import REGISTRY

from chronos.admin.api import AdminAPI
from chronos.cluster.monitor import Monitor
from chronos.observability.tenants import OTHER, TenantLabels, TenantMetrics
from chronos.store import ClaimedRow, Outcome
from tests.unit.helpers import Firing
from tests.unit.store_contract import msg
from tests.unit.test_admin_cli import Node, as_json, node, run  # noqa: F401 (the node fixture)
from tests.unit.test_admin_unit import TOKEN, Harness, _validate, make_settings


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class TenantHarness(Harness):
    def __init__(self, **overrides: object) -> None:
        super().__init__()
        self.settings = make_settings(TOKEN, **overrides)
        self.api = AdminAPI(self.settings, self.store)


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


# ------------------------------------------------------------------------ the firing loop


def test_the_firing_loop_counts_fired_messages_by_tenant() -> None:
    first, second = (f"fl-{uuid.uuid4()}" for _ in range(2))
    f = Firing.create(tenant_metrics_top=1)
    claim = f.store.claim

    def claim_with_tenants(*args: object, **kwargs: object) -> list[ClaimedRow]:
        rows = claim(*args, **kwargs)  # type: ignore[arg-type]
        return [r._replace(tenant=first if r.id.startswith("a") else second) for r in rows]

    f.loop.store.claim = claim_with_tenants  # type: ignore[method-assign]
    ids = ["a1", "a2", "a3", "b1", "b2"]
    for i, message_id in enumerate(ids):
        assert f.store.enqueue([msg(message_id, f.at(100 + 50 * i))], 0) == [Outcome.INSERTED]
    other = sample("chronos_tenant_fired_messages_total", tenant=OTHER)
    f.run_for(2000, step_ms=5)
    assert len(f.store) == 0
    assert sample("chronos_tenant_fired_messages_total", tenant=first) == 3
    assert sample("chronos_tenant_fire_lateness_seconds_count", tenant=first) == 3
    assert sample("chronos_tenant_fired_messages_total", tenant=second) == 0  # top 1: _other
    assert sample("chronos_tenant_fired_messages_total", tenant=OTHER) - other == 2


# ------------------------------------------------------------------------ the leader's gauges


def _tenant_table(h: TenantHarness) -> None:
    soon, later = h.clock.now() + timedelta(seconds=1), h.clock.now() + timedelta(hours=1)
    rows = {"f1": ("gflood", soon), "f2": ("gflood", soon), "s1": ("gsmall", soon)}
    rows |= {"s2": ("gsmall", later), "q1": ("gquiet", later)}
    h.store.enqueue([msg(i, d) for i, (_, d) in rows.items()], 0)
    for message_id, (tenant, _) in rows.items():
        h.store.set_tenant(message_id, tenant)
    h.clock.advance(31_000)


def test_the_leader_publishes_the_top_tenants_overdue_and_drops_the_others() -> None:
    h = TenantHarness(tenant_metrics_top=2)
    _tenant_table(h)
    monitor = Monitor(h.settings, h.store)
    result = monitor.refresh_tenants()
    assert result is not None and [t.tenant for t in result.tenants] == ["gflood", "gsmall"]
    assert sample("chronos_tenant_overdue_messages", tenant="gflood") == 2
    assert sample("chronos_tenant_overdue_messages", tenant="gsmall") == 1
    assert sample("chronos_tenant_oldest_overdue_message_age_seconds", tenant="gsmall") == (
        pytest.approx(30)
    )
    assert (
        REGISTRY.get_sample_value("chronos_tenant_overdue_messages", {"tenant": "gquiet"}) is None
    )
    h.store.cancel_message("s1")  # gsmall is no longer overdue: its series goes
    monitor.refresh_tenants()
    assert (
        REGISTRY.get_sample_value("chronos_tenant_overdue_messages", {"tenant": "gsmall"}) is None
    )
    assert sample("chronos_tenant_overdue_messages", tenant="gflood") == 2
    monitor.tenant_gauges.clear()  # as when the node stops leading
    assert (
        REGISTRY.get_sample_value("chronos_tenant_overdue_messages", {"tenant": "gflood"}) is None
    )


def test_a_failed_tenant_refresh_is_counted_not_raised() -> None:
    h = TenantHarness()
    h.store.fail_next(1, "tenant_backlog")
    before = sample("chronos_database_errors_total", operation="tenant_backlog")
    assert Monitor(h.settings, h.store).refresh_tenants() is None
    assert sample("chronos_database_errors_total", operation="tenant_backlog") == before + 1


# ------------------------------------------------------------------------ the admin API


def test_tenants_endpoint_lists_the_busiest_as_the_spec_says() -> None:
    h = TenantHarness(tenant_metrics_top=2)
    _tenant_table(h)
    status, _, body = h.call("GET", "/admin/v1/tenants")
    assert status == 200
    _validate(body, "TenantList")
    assert body["limit"] == 2 and body["tenants_complete"]
    assert [(t["tenant"], t["overdue"], t["waiting"]) for t in body["tenants"]] == [
        ("gflood", 2, 2),
        ("gsmall", 1, 2),
    ]
    assert body["tenants"][0]["oldest_overdue_age_seconds"] == pytest.approx(30)
    status, _, body = h.call("GET", "/admin/v1/tenants", "limit=3")
    assert [t["tenant"] for t in body["tenants"]] == ["gflood", "gsmall", "gquiet"]


@pytest.mark.parametrize("query", ["limit=0", "limit=1001", "limit=x", "by=tenant"])
def test_tenants_endpoint_refuses_bad_parameters(query: str) -> None:
    status, _, body = TenantHarness().call("GET", "/admin/v1/tenants", query)
    assert status == 400 and body["error"]


def test_tenants_endpoint_needs_the_token_and_get() -> None:
    h = TenantHarness()
    assert h.call("GET", "/admin/v1/tenants", headers={})[0] == 401
    assert h.call("POST", "/admin/v1/tenants")[0] == 405


# ------------------------------------------------------------------------ chronos admin tenants


def test_the_cli_shows_tenants_as_a_table_and_as_json(
    node: Node,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    for i in range(5):
        node.store.set_tenant(f"m{i}", "acme" if i < 3 else "")
    status, out, _ = run(capsys, node, "tenants")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "TENANT",
        "OVERDUE",
        "OLDEST_OVERDUE_AGE_SECONDS",
        "WAITING",
        "CLAIMED",
        "PARKED",
    ]
    assert lines[1].split() == ["'acme'", "0", "0.0", "3", "0", "0"]
    assert lines[2].split() == ["''", "0", "0.0", "2", "0", "0"]
    status, out, _ = run(capsys, node, "tenants", "--limit", "1", "--json")
    payload = as_json(out)
    assert [t["tenant"] for t in payload["tenants"]] == ["acme"] and payload["limit"] == 1
