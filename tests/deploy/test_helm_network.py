"""The chart's ports and who may reach them: the admin API and the console on a port of their own
(admin.separatePort, CHRONOS_ADMIN_PORT) and a NetworkPolicy that lets the metrics scrapers reach
health and metrics only, and the admin clients the admin port only."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from chronos.config import settings
from chronos.config.validation import validate
from tests.deploy.helm_support import merge, render
from tests.deploy.helm_values import (
    SCENARIOS,
    chronos_container,
    deployment,
    pod_environment,
    render_error,
)

SPLIT = SCENARIOS["admin-port-network-policy"]
PROMETHEUS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}
OPERATORS = {"podSelector": {"matchLabels": {"role": "chronos-operator"}}}


def _ports(container_or_service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    ports = container_or_service.get("ports") or container_or_service["spec"]["ports"]
    return {p["name"]: p for p in ports}


def _rules(rendered: Any) -> dict[str, list[dict[str, Any]]]:
    """The NetworkPolicy's ingress rules: port name -> the peers it admits."""
    rules: dict[str, list[dict[str, Any]]] = {}
    for rule in rendered.one("NetworkPolicy")["spec"]["ingress"]:
        assert rule.get("from"), "a rule without peers would admit everyone"
        for port in rule["ports"]:
            rules.setdefault(port["port"], []).extend(rule["from"])
    return rules


# ----------------------------------------------------------------------------------------------
# The admin port
# ----------------------------------------------------------------------------------------------


def test_one_port_by_default() -> None:
    rendered = render()
    assert list(_ports(chronos_container(rendered))) == ["http"]
    assert list(_ports(rendered.one("Service"))) == ["http"]
    assert "CHRONOS_ADMIN_PORT" not in pod_environment(rendered)
    assert "NetworkPolicy" not in rendered.kinds()


def test_a_separate_admin_port_is_set_exposed_and_served() -> None:
    rendered = render(SPLIT)
    container = _ports(chronos_container(rendered))
    assert container["http"]["containerPort"] == 8080
    assert container["admin"]["containerPort"] == 9091
    service = _ports(rendered.one("Service"))
    assert (service["http"]["port"], service["http"]["targetPort"]) == (8080, "http")
    assert (service["admin"]["port"], service["admin"]["targetPort"]) == (9443, "admin")
    # The node gets the setting and accepts it: it serves the admin API on that port.
    loaded = validate(settings.load(environ=pod_environment(rendered)))
    assert (loaded.http_port, loaded.admin_port) == (8080, 9091)
    # Probes and the scrape stay on the HTTP port.
    assert chronos_container(rendered)["readinessProbe"]["httpGet"]["port"] == "http"
    assert rendered.one("ServiceMonitor")["spec"]["endpoints"][0]["port"] == "http"
    assert "own port 9091" in rendered.notes


def test_the_admin_port_follows_a_moved_http_port() -> None:
    rendered = render(merge(SPLIT, {"config": {"CHRONOS_HTTP_PORT": 9000}}))
    loaded = validate(settings.load(environ=pod_environment(rendered)))
    assert (loaded.http_port, loaded.admin_port) == (9000, 9091)


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"admin": {"separatePort": True, "port": 8080}}, "must differ from CHRONOS_HTTP_PORT"),
        (
            {"admin": {"separatePort": True, "port": 9000}, "config": {"CHRONOS_HTTP_PORT": 9000}},
            "admin.port=9000",
        ),
        ({"config": {"CHRONOS_ADMIN_PORT": 8081}}, "admin.separatePort"),
    ],
)
def test_the_admin_port_is_checked(values: dict[str, Any], says: str) -> None:
    assert says in render_error(values)


@pytest.mark.parametrize(
    "values",
    [
        {"admin": {"port": 0}},
        {"admin": {"port": 70000}},
        {"admin": {"separatePort": "yes"}},
        {"service": {"adminPort": 0}},
        {"networkPolicy": {"metricsFrom": {"podSelector": {}}}},  # a map, not a list
        {"networkPolicy": {"allowAll": True}},
    ],
)
def test_the_schema_refuses_bad_admin_and_policy_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)


# ----------------------------------------------------------------------------------------------
# The NetworkPolicy
# ----------------------------------------------------------------------------------------------


def test_the_policy_selects_the_nodes_and_limits_ingress_only() -> None:
    rendered = render(SPLIT)
    policy = rendered.one("NetworkPolicy")
    assert policy["spec"]["podSelector"] == deployment(rendered)["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # Kafka and Postgres stay reachable
    # Every port it names is a port of the node's container.
    assert set(_rules(rendered)) <= set(_ports(chronos_container(rendered)))


def test_scrapers_reach_metrics_only_and_admin_clients_the_admin_port_only() -> None:
    values = merge(
        SPLIT, {"networkPolicy": {"metricsFrom": [PROMETHEUS], "adminFrom": [OPERATORS]}}
    )
    rules = _rules(render(values))
    assert rules == {"http": [PROMETHEUS], "admin": [OPERATORS]}


def test_the_defaults_admit_prometheus_pods_and_labelled_admin_clients() -> None:
    rules = _rules(render(SPLIT))
    (scraper,) = rules["http"]
    assert scraper["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    (client,) = rules["admin"]
    assert "namespaceSelector" not in client  # the release's namespace only
    assert client["podSelector"]["matchLabels"] == {"chronos/admin-client": "true"}


def test_without_a_separate_port_the_http_port_admits_both_lists() -> None:
    values = {
        "networkPolicy": {"enabled": True, "metricsFrom": [PROMETHEUS], "adminFrom": [OPERATORS]}
    }
    rendered = render(values)
    assert _rules(rendered) == {"http": [PROMETHEUS, OPERATORS]}
    assert "set admin.separatePort" in rendered.notes


@pytest.mark.parametrize("separate", [True, False])
def test_empty_lists_admit_no_one(separate: bool) -> None:
    values = merge(
        SPLIT,
        {
            "admin": {"separatePort": separate},
            "networkPolicy": {"metricsFrom": [], "adminFrom": []},
        },
    )
    assert render(values).one("NetworkPolicy")["spec"]["ingress"] == []


def test_no_admin_clients_leaves_the_admin_port_closed() -> None:
    values = merge(SPLIT, {"networkPolicy": {"adminFrom": []}})
    assert set(_rules(render(values))) == {"http"}
