"""The Helm chart's autoscaling: KEDA on the input topic's consumer lag (and Prometheus), or an
HPA, never both."""

from __future__ import annotations

from chronos.config import settings
from tests.deploy.helm_support import (
    MINIMAL_VALUES,
    merge,
    render,
    secret_payload,
)
from tests.deploy.helm_values import (
    SCENARIOS,
    deployment,
    render_error,
)

# ----------------------------------------------------------------------------------------------
# Autoscaling
# ----------------------------------------------------------------------------------------------


def test_keda_scales_on_the_input_topic_consumer_lag() -> None:
    rendered = render(merge(SCENARIOS["keda-lag"], SCENARIOS["tuned"]))
    scaled = rendered.one("ScaledObject")
    spec = scaled["spec"]
    assert spec["scaleTargetRef"]["name"] == deployment(rendered)["metadata"]["name"]
    assert spec["minReplicaCount"] >= 1  # must never scale to zero: due messages must still fire
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "kafka"
    meta = trigger["metadata"]
    assert meta["topic"] == "orders.delay"
    assert meta["consumerGroup"] == "orders-chronos"
    assert meta["bootstrapServers"] == MINIMAL_VALUES["config"]["CHRONOS_KAFKA_BOOTSTRAP_SERVERS"]
    assert meta["lagThreshold"] == "1000"
    assert "authenticationRef" not in trigger
    assert "TriggerAuthentication" not in rendered.kinds()


def test_keda_defaults_follow_chronos_defaults() -> None:
    meta = render(SCENARIOS["keda-lag"]).one("ScaledObject")["spec"]["triggers"][0]["metadata"]
    assert meta["topic"] == settings.OPTIONS_BY_NAME["input_topic"].default
    assert meta["consumerGroup"] == settings.OPTIONS_BY_NAME["consumer_group"].default


def test_keda_sasl_reads_credentials_from_the_nodes_secret() -> None:
    rendered = render(SCENARIOS["keda-sasl-prometheus"])
    auth = rendered.one("TriggerAuthentication")
    triggers = {t["type"]: t for t in rendered.one("ScaledObject")["spec"]["triggers"]}
    assert triggers["kafka"]["authenticationRef"]["name"] == auth["metadata"]["name"]
    assert triggers["kafka"]["metadata"]["sasl"] == "scram_sha512"
    assert triggers["kafka"]["metadata"]["tls"] == "enable"
    assert triggers["kafka"]["metadata"]["lagThreshold"] == "5000"
    payload = secret_payload(rendered.one("Secret", "chronos"))
    for ref in auth["spec"]["secretTargetRef"]:
        assert ref["name"] == "chronos"
        assert ref["key"] in payload
    # Table-wide gauges are reported by every node alike: max(), not sum().
    assert triggers["prometheus"]["metadata"]["query"] == "max(chronos_overdue_messages)"
    assert triggers["prometheus"]["metadata"]["serverAddress"] == "http://prometheus:9090"


def test_keda_prometheus_trigger_needs_a_server() -> None:
    message = render_error(
        {"autoscaling": {"keda": {"enabled": True, "prometheus": {"enabled": True}}}}
    )
    assert "serverAddress" in message


def test_hpa() -> None:
    rendered = render(SCENARIOS["hpa"])
    hpa = rendered.one("HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "chronos",
    }
    assert hpa["spec"]["minReplicas"] == 2
    types = [m["type"] for m in hpa["spec"]["metrics"]]
    assert types == ["Resource", "External"]
    assert hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"] == 70


def test_hpa_and_keda_are_exclusive() -> None:
    values = merge(SCENARIOS["hpa"], SCENARIOS["keda-lag"])
    assert "mutually exclusive" in render_error(values)
