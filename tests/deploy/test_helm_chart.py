"""The Helm chart (helm/chronos), rendered offline by Helm's own engine (see helm_support): its
metadata, lint, values schema, the Kubernetes schemas of every manifest, and the objects an
install creates."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.deploy.helm_support import (
    CHART_DIR,
    KUBE_VERSIONS,
    MINIMAL_VALUES,
    NAMESPACE,
    lint,
    merge,
    render,
    validate,
)
from tests.deploy.helm_values import (
    SCENARIOS,
    render_error,
)

# ----------------------------------------------------------------------------------------------
# Chart metadata, lint, schema
# ----------------------------------------------------------------------------------------------


def test_chart_metadata() -> None:
    meta = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2"
    assert meta["name"] == "chronos"
    assert meta["type"] == "application"
    assert str(meta["appVersion"]) == "0.1.0"


@pytest.mark.parametrize("scenario", ["defaults", "minimal", *SCENARIOS])
def test_chart_lints_clean(scenario: str) -> None:
    # Lint renders in Helm's lint mode, where `fail` is reported but not fatal, so the chart's
    # defaults (no Kafka, no database) lint too. Only the info "icon is recommended" may remain.
    values = None if scenario == "defaults" else merge(MINIMAL_VALUES, SCENARIOS.get(scenario, {}))
    report = lint(values)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_defaults_refuse_to_render_without_kafka_and_database() -> None:
    message = render_error({}, minimal=False)
    assert "CHRONOS_KAFKA_BOOTSTRAP_SERVERS is required" in message
    message = render_error({"config": {"CHRONOS_KAFKA_BOOTSTRAP_SERVERS": "k:9092"}}, minimal=False)
    assert "secrets.databaseUrl is required" in message


@pytest.mark.parametrize(
    "values",
    [
        {"replicaCount": 0},
        {"replicaCount": "2"},
        {"unknownTopLevelKey": True},
        {"config": {"chronos_lowercase": "x"}},
        {"autoscaling": {"keda": {"minReplicaCount": 0}}},
        {"autoscaling": {"keda": {"kafka": {"sasl": "kerberos"}}}},
        {"podAntiAffinity": {"type": "sometimes"}},
        {"image": {"digest": "latest"}},
    ],
)
def test_schema_rejects_bad_values(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)


# ----------------------------------------------------------------------------------------------
# Kubernetes schemas
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_manifest_validates(scenario: str, kube_version: str) -> None:
    rendered = render(SCENARIOS[scenario])
    assert rendered.manifests
    for manifest in rendered.manifests:
        validate(manifest, kube_version)
        assert manifest["metadata"].get("namespace") == NAMESPACE, manifest["kind"]


def test_minimal_install_objects() -> None:
    rendered = render()
    assert rendered.kinds() == sorted(
        [
            "ConfigMap",
            "Deployment",
            "Job",
            "PodDisruptionBudget",
            "Secret",  # the nodes' credentials
            "Secret",  # the migration hook's copy of the database URL
            "Service",
            "ServiceAccount",
        ]
    )


def test_optional_objects_are_off_by_default() -> None:
    kinds = render().kinds()
    for kind in (
        "HorizontalPodAutoscaler",
        "ScaledObject",
        "TriggerAuthentication",
        "ServiceMonitor",
    ):
        assert kind not in kinds


def test_metrics_named_by_the_chart_exist() -> None:
    """Queries in values.yaml and NOTES.txt name metrics that chronos/observability/metrics.py
    defines."""
    import chronos.observability.metrics

    source = Path(chronos.observability.metrics.__file__).read_text()
    chart_text = (CHART_DIR / "values.yaml").read_text() + (
        CHART_DIR / "templates" / "NOTES.txt"
    ).read_text()
    names = set(re.findall(r"\bchronos_[a-z_]+[a-z]\b", chart_text))
    assert "chronos_overdue_messages" in names
    for name in names:
        assert f'"{name}"' in source, f"{name} is not a Chronos metric"
