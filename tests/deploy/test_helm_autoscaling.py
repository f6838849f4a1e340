"""The Helm chart's autoscaling: KEDA on the input topic's consumer lag (and Prometheus), or an
HPA, never both."""

from __future__ import annotations

from typing import Any

import pytest

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


# ----------------------------------------------------------------------------------------------
# The KEDA lag trigger connects to the brokers as the nodes do (TLS, a private CA, SASL)
# ----------------------------------------------------------------------------------------------


def _kafka_trigger(rendered: Any) -> dict[str, Any]:
    triggers = rendered.one("ScaledObject")["spec"]["triggers"]
    (trigger,) = [t for t in triggers if t["type"] == "kafka"]
    return trigger  # type: ignore[no-any-return]


def _auth_refs(rendered: Any) -> dict[str, tuple[str, str]]:
    """The generated TriggerAuthentication: parameter -> (Secret, key)."""
    auth = rendered.one("TriggerAuthentication")
    assert _kafka_trigger(rendered)["authenticationRef"]["name"] == auth["metadata"]["name"]
    return {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}


def test_keda_gets_the_nodes_sasl_tls_private_ca_and_client_certificate() -> None:
    rendered = render(SCENARIOS["keda-tls-private-ca"])
    meta = _kafka_trigger(rendered)["metadata"]
    # From the nodes' CHRONOS_KAFKA__SECURITY_PROTOCOL=SASL_SSL and SASL_MECHANISMS=SCRAM-SHA-512.
    assert (meta["sasl"], meta["tls"]) == ("scram_sha512", "enable")
    assert _auth_refs(rendered) == {
        "username": ("chronos", "CHRONOS_KAFKA__SASL_USERNAME"),
        "password": ("chronos", "CHRONOS_KAFKA__SASL_PASSWORD"),
        "ca": ("kafka-client-tls", "ca.crt"),
        "cert": ("kafka-client-tls", "tls.crt"),
        "key": ("kafka-client-tls", "tls.key"),
        "keyPassword": ("chronos", "CHRONOS_KAFKA__SSL_KEY_PASSWORD"),
    }
    # The same files the nodes mount, and keys the chart's Secret holds.
    volume = next(
        v
        for v in deployment(rendered)["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "kafka-tls"
    )
    mounted = {item["key"] for item in volume["secret"]["items"]}
    assert mounted == {"ca.crt", "tls.crt", "tls.key"}
    payload = secret_payload(rendered.one("Secret", "chronos"))
    for secret, key in _auth_refs(rendered).values():
        if secret == "chronos":
            assert key in payload


def test_keda_trusts_a_private_ca_over_tls_without_sasl() -> None:
    values = {
        "config": {"CHRONOS_KAFKA__SECURITY_PROTOCOL": "SSL"},
        "kafkaTLS": {"secretName": "kafka-ca"},
        "autoscaling": {"keda": {"enabled": True}},
    }
    rendered = render(values)
    meta = _kafka_trigger(rendered)["metadata"]
    assert (meta["sasl"], meta["tls"]) == ("none", "enable")
    assert _auth_refs(rendered) == {"ca": ("kafka-ca", "ca.crt")}


@pytest.mark.parametrize(
    ("mechanism", "mode"),
    [("PLAIN", "plaintext"), ("SCRAM-SHA-256", "scram_sha256"), ("scram-sha-512", "scram_sha512")],
)
def test_keda_sasl_follows_the_nodes_mechanism(mechanism: str, mode: str) -> None:
    values = {
        "config": {
            "CHRONOS_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "CHRONOS_KAFKA__SASL_MECHANISMS": mechanism,
        },
        "secrets": {"kafkaSaslUsername": "u", "kafkaSaslPassword": "p"},
        "autoscaling": {"keda": {"enabled": True}},
    }
    rendered = render(values)
    meta = _kafka_trigger(rendered)["metadata"]
    assert (meta["sasl"], meta["tls"]) == (mode, "disable")
    assert set(_auth_refs(rendered)) == {"username", "password"}


def test_an_existing_secret_may_hold_the_key_password() -> None:
    values = {
        "secrets": {"databaseUrl": "", "existingSecret": "chronos-credentials"},
        "config": {"CHRONOS_KAFKA__SECURITY_PROTOCOL": "SSL"},
        "kafkaTLS": {"secretName": "tls", "certificateKey": "c.pem", "keyKey": "k.pem"},
        "autoscaling": {"keda": {"enabled": True}},
    }
    refs = _auth_refs(render(values))
    assert refs["keyPassword"] == ("chronos-credentials", "CHRONOS_KAFKA__SSL_KEY_PASSWORD")
    assert refs["cert"] == ("tls", "c.pem")


def test_explicit_keda_modes_and_an_own_authentication_win() -> None:
    explicit = merge(
        SCENARIOS["keda-tls-private-ca"],
        {"autoscaling": {"keda": {"kafka": {"sasl": "none", "tls": "disable"}}}},
    )
    rendered = render(explicit)
    assert (_kafka_trigger(rendered)["metadata"]["tls"]) == "disable"
    assert "TriggerAuthentication" not in rendered.kinds()
    own = merge(
        SCENARIOS["keda-tls-private-ca"],
        {"autoscaling": {"keda": {"kafka": {"authenticationRef": "team-kafka-auth"}}}},
    )
    rendered = render(own)
    assert _kafka_trigger(rendered)["authenticationRef"] == {"name": "team-kafka-auth"}
    assert "TriggerAuthentication" not in rendered.kinds()


def test_a_mechanism_keda_cannot_be_given_is_named() -> None:
    values = {
        "config": {
            "CHRONOS_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
            "CHRONOS_KAFKA__SASL_MECHANISMS": "OAUTHBEARER",
        },
        "autoscaling": {"keda": {"enabled": True}},
    }
    message = render_error(values)
    assert "autoscaling.keda.kafka.sasl" in message and "OAUTHBEARER" in message
    # Without the lag trigger, nothing to configure.
    prometheus = {"enabled": True, "serverAddress": "http://prometheus:9090"}
    render(
        merge(
            values,
            {"autoscaling": {"keda": {"kafka": {"enabled": False}, "prometheus": prometheus}}},
        )
    )
