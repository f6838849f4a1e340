"""The operator's view: the Grafana dashboard and the Prometheus alert rules, in the chart and as
plain files. Every query may name only metrics Chronos exports; the rules pass promtool's own
checks and unit tests (synthetic series, tests/deploy/prometheus/)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.metrics_core import Metric

import chronos.observability.metrics  # noqa: F401 - registers every Chronos metric in REGISTRY
from tests.deploy.helm_support import CHART_DIR, KUBE_VERSIONS, lint, render, validate
from tests.support.services import unavailable

DASHBOARD = CHART_DIR / "dashboards" / "chronos.json"
RULES = CHART_DIR / "rules" / "chronos-alerts.yaml"
RULE_TESTS = Path(__file__).parent / "prometheus" / "chronos-alerts.test.yaml"
# Exported by the leader-election work (a gauge, 1 on the leader); the dashboard shows it.
LEADER_METRIC = "chronos_leader"

ENABLED = {
    "metrics": {
        "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "Chronos"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    }
}


def exported_series() -> set[str]:
    """Every series name Chronos's registry can expose (counters' _total, histograms' parts)."""
    names = {LEADER_METRIC}
    families: list[Metric] = [m for m in REGISTRY.collect() if m.name.startswith("chronos_")]
    for family in families:
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + s for s in ("_bucket", "_sum", "_count"))
        else:
            names.add(family.name)
    return names


_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
    "and", "or", "unless", "inf", "nan",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (labels, functions and keywords removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word, rest = match.group(), text[match.end() :].lstrip()
        if rest.startswith("(") or word.lower() in _KEYWORDS:
            continue  # a function or a keyword
        if re.fullmatch(r"[0-9.e+-]*", word):
            continue
        names.add(word)
    return names


def dashboard_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def rule_exprs() -> list[tuple[str, str]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [(rule["alert"], rule["expr"]) for group in groups for rule in group["rules"]]


def test_metric_name_extraction() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le) (rate(chronos_fire_lateness_seconds_bucket"
        '{job="x"}[$__rate_interval]))) > 1 and on (instance) time() - max(up) > 60'
    )
    assert metric_names(expr) == {"chronos_fire_lateness_seconds_bucket", "up"}


def test_every_dashboard_query_names_only_chronos_metrics() -> None:
    exported = exported_series()
    assert "chronos_fire_lateness_seconds_bucket" in exported
    dashboard = json.loads(DASHBOARD.read_text())
    queries = dashboard_queries(dashboard)
    assert len(queries) >= 20
    for title, expr in queries:
        names = metric_names(expr)
        assert names, f"panel {title!r}: {expr!r} selects no metric"
        unknown = names - exported
        assert not unknown, f"panel {title!r} queries metrics Chronos does not export: {unknown}"


def test_the_dashboard_covers_what_an_operator_watches() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    everything = " ".join(expr for _, expr in dashboard_queries(dashboard))
    for metric in (
        "chronos_consumed_messages_total",
        "chronos_fired_messages_total",
        "chronos_fire_lateness_seconds_bucket",
        "chronos_waiting_messages",
        "chronos_claimed_messages",
        "chronos_overdue_messages",
        "chronos_parked_messages",
        "chronos_consumer_lag_messages",
        "chronos_dead_lettered_messages_total",
        "chronos_suspected_failures_total",
        "chronos_database_errors_total",
        "chronos_publish_errors_total",
        LEADER_METRIC,
    ):
        assert metric in everything, f"the dashboard does not show {metric}"
    assert "sum by (instance) (chronos_consumer_lag_messages)" in everything
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and dashboard["uid"] == "chronos-overview"


def test_every_rule_names_only_chronos_metrics() -> None:
    exported = exported_series()
    for alert, expr in rule_exprs():
        unknown = metric_names(expr) - exported
        assert not unknown, f"alert {alert} queries metrics Chronos does not export: {unknown}"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        unavailable(
            "promtool is not installed (Debian's `prometheus` package; `make test` installs it)"
        )
    return path


def test_promtool_checks_the_rules() -> None:
    done = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rule_exprs())} rules found" in done.stdout


def test_promtool_unit_tests_of_the_rules() -> None:
    done = subprocess.run(
        [promtool(), "test", "rules", RULE_TESTS.name],
        cwd=RULE_TESTS.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_both_are_off_by_default() -> None:
    rendered = render()
    assert "PrometheusRule" not in rendered.kinds()
    assert not [
        m for m in rendered.of_kind("ConfigMap") if m["metadata"]["name"].endswith("-dashboard")
    ]


def test_the_chart_lints_with_both_enabled() -> None:
    result = lint(ENABLED)
    assert not result.get("errors"), result


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_the_dashboard_configmap_carries_the_file_for_the_sidecar(kube_version: str) -> None:
    rendered = render(ENABLED)
    config_map = rendered.one("ConfigMap", "chronos-dashboard")
    validate(config_map, kube_version)
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Chronos"}
    assert json.loads(config_map["data"]["chronos.json"]) == json.loads(DASHBOARD.read_text())


def test_the_sidecar_label_and_namespace_are_configurable() -> None:
    rendered = render(
        {
            "metrics": {
                "grafanaDashboard": {
                    "enabled": True,
                    "label": "grafana.io/dashboard",
                    "labelValue": "chronos",
                    "namespace": "monitoring",
                }
            }
        }
    )
    config_map = rendered.one("ConfigMap", "chronos-dashboard")
    assert config_map["metadata"]["labels"]["grafana.io/dashboard"] == "chronos"
    assert config_map["metadata"]["namespace"] == "monitoring"


# The parts of the Prometheus Operator's PrometheusRule CRD (monitoring.coreos.com/v1) used.
PROMETHEUS_RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string"},
                            "interval": {"type": "string"},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["expr"],
                                    "properties": {
                                        "alert": {"type": "string"},
                                        "record": {"type": "string"},
                                        "expr": {"type": "string"},
                                        "for": {"type": "string"},
                                        "labels": {
                                            "type": "object",
                                            "additionalProperties": {"type": "string"},
                                        },
                                        "annotations": {
                                            "type": "object",
                                            "additionalProperties": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
    },
}


def test_the_prometheus_rule_holds_the_rules_file() -> None:
    rule = render(ENABLED).one("PrometheusRule")
    jsonschema.Draft202012Validator(PROMETHEUS_RULE_SCHEMA).validate(rule)
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


def test_the_rendered_rule_passes_promtool(tmp_path: Path) -> None:
    rule = render(ENABLED).one("PrometheusRule")
    rendered = tmp_path / "rendered-rules.yaml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    done = subprocess.run(
        [promtool(), "check", "rules", str(rendered)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
