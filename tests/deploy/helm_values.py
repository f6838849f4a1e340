"""The chart's values for the deployment tests: credentials, the non-default scenarios every
manifest of which must validate, and accessors of a render's objects."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from tests.deploy.helm_support import containers, merge, render, secret_payload

DB_PASSWORD = "s3cr3t-db-pass"
DB_URL = f"postgresql://chronos:{DB_PASSWORD}@postgres.db:5432/chronos?sslmode=require"
ADMIN_TOKEN = "adm1n-t0ken-7f3a9c"
ADMIN_READ_TOKEN = "r3ad-0nly-t0ken-2b8e"
SASL_USER = "chronos-sasl-user"
SASL_PASSWORD = "k4fka-sasl-pw-Q9"
SSL_KEY_PASSWORD = "ssl-k3y-pw-Z1"

SECRET_VALUES = {
    "secrets": {
        "databaseUrl": DB_URL,
        "adminToken": ADMIN_TOKEN,
        "adminReadToken": ADMIN_READ_TOKEN,
        "kafkaSaslUsername": SASL_USER,
        "kafkaSaslPassword": SASL_PASSWORD,
        "extra": {"CHRONOS_KAFKA__SSL_KEY_PASSWORD": SSL_KEY_PASSWORD},
    },
    "config": {
        "CHRONOS_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "CHRONOS_KAFKA__SASL_MECHANISMS": "SCRAM-SHA-512",
    },
}
SECRET_STRINGS = (
    DB_URL,
    DB_PASSWORD,
    ADMIN_TOKEN,
    ADMIN_READ_TOKEN,
    SASL_USER,
    SASL_PASSWORD,
    SSL_KEY_PASSWORD,
)

# Non-default configurations every manifest of which must validate.
SCENARIOS: dict[str, dict[str, Any]] = {
    "minimal": {},
    "secrets": SECRET_VALUES,
    "existing-secret": {"secrets": {"databaseUrl": "", "existingSecret": "chronos-credentials"}},
    "keda-lag": {"autoscaling": {"keda": {"enabled": True}}},
    "keda-sasl-prometheus": merge(
        SECRET_VALUES,
        {
            "autoscaling": {
                "keda": {
                    "enabled": True,
                    "kafka": {"sasl": "scram_sha512", "tls": "enable", "lagThreshold": 5000},
                    "prometheus": {"enabled": True, "serverAddress": "http://prometheus:9090"},
                    "fallback": {"failureThreshold": 3, "replicas": 2},
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 600}},
                }
            }
        },
    ),
    "hpa": {
        "autoscaling": {
            "hpa": {
                "enabled": True,
                "metrics": [
                    {
                        "type": "External",
                        "external": {
                            "metric": {
                                "name": "kafka_consumergroup_lag",
                                "selector": {"matchLabels": {"consumergroup": "chronos"}},
                            },
                            "target": {"type": "AverageValue", "averageValue": "1000"},
                        },
                    }
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
            }
        }
    },
    "service-monitor": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"team": "x"}}}},
    "required-anti-affinity-3-replicas": {
        "replicaCount": 3,
        "podAntiAffinity": {"type": "required"},
        "podDisruptionBudget": {"minAvailable": 2, "unhealthyPodEvictionPolicy": "AlwaysAllow"},
    },
    "escape-hatches": {
        "preflight": {"enabled": True},
        "extraEnv": [
            {"name": "AWS_REGION", "value": "eu-west-1"},
            {"name": "HTTPS_PROXY", "value": "http://proxy.internal:3128"},
            {"name": "CHRONOS_AUDIT_TOPIC", "value": "chronos-audit"},
            {
                "name": "CHRONOS_ADMIN_TOKEN",
                "valueFrom": {"secretKeyRef": {"name": "vault-admin", "key": "token"}},
            },
        ],
        "extraEnvFrom": [{"configMapRef": {"name": "proxy-settings"}}],
        "extraVolumes": [{"name": "proxy-certs", "secret": {"secretName": "proxy-ca"}}],
        "extraVolumeMounts": [
            {"name": "proxy-certs", "mountPath": "/etc/proxy-ca", "readOnly": True}
        ],
        "sidecars": [
            {
                "name": "cloud-sql-proxy",
                "image": "gcr.io/cloud-sql-connectors/cloud-sql-proxy:2.11.0",
                "args": ["--port=5432", "project:region:instance"],
            }
        ],
        "initContainers": [
            {"name": "wait-for-proxy", "image": "busybox:1.36", "command": ["true"]}
        ],
    },
    "admin-port-network-policy": {
        "admin": {"separatePort": True, "port": 9091},
        "service": {"adminPort": 9443},
        "networkPolicy": {"enabled": True},
        "metrics": {"serviceMonitor": {"enabled": True}},
    },
    "keda-tls-private-ca": merge(
        SECRET_VALUES,
        {
            "kafkaTLS": {
                "secretName": "kafka-client-tls",
                "certificateKey": "tls.crt",
                "keyKey": "tls.key",
            },
            "autoscaling": {"keda": {"enabled": True}},
        },
    ),
    "tuned": {
        "config": {
            "CHRONOS_HTTP_PORT": 9090,
            "CHRONOS_SHUTDOWN_TIMEOUT_MS": 45000,
            "CHRONOS_MAX_IN_FLIGHT": 1000000,
            "CHRONOS_INPUT_TOPIC": "orders.delay",
            "CHRONOS_CONSUMER_GROUP": "orders-chronos",
            "CHRONOS_LOG_LEVEL": "DEBUG",
            "CHRONOS_DEAD_LETTER_TOPIC": "",
        },
        "terminationGracePeriodSeconds": 60,
        "image": {"repository": "registry.example/chronos", "digest": "sha256:" + "a" * 64},
        "serviceAccount": {"create": False, "name": "chronos-workload"},
        "migrations": {"enabled": False},
        "podDisruptionBudget": {"minAvailable": None, "maxUnavailable": 1},
        "podAntiAffinity": {"type": "none"},
        "nodeSelector": {"kubernetes.io/arch": "amd64"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "chronos"}],
        "priorityClassName": "high",
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "chronos"}},
            }
        ],
    },
}


def deployment(rendered: Any) -> dict[str, Any]:
    return rendered.one("Deployment")  # type: ignore[no-any-return]


def chronos_container(rendered: Any) -> dict[str, Any]:
    (container,) = [c for c in containers(deployment(rendered)) if c["name"] == "chronos"]
    return container


def migration_job(rendered: Any) -> dict[str, Any]:
    return rendered.one("Job")  # type: ignore[no-any-return]


def render_error(values: dict[str, Any], *, minimal: bool = True) -> str:
    with pytest.raises(helm.HelmError) as caught:
        render(values, minimal=minimal)
    return str(caught.value)


def pod_environment(rendered: Any) -> dict[str, str]:
    """The CHRONOS_* environment a node container starts with (envFrom ConfigMap + Secret)."""
    env: dict[str, str] = {}
    # The chart's ConfigMap and Secret; the sources of extraEnvFrom (after them) are the user's.
    for source in chronos_container(rendered)["envFrom"][:2]:
        if "configMapRef" in source:
            env.update(rendered.one("ConfigMap", source["configMapRef"]["name"])["data"])
        else:
            env.update(secret_payload(rendered.one("Secret", source["secretRef"]["name"])))
    for item in chronos_container(rendered).get("env", []):
        if "value" in item:  # not those read from elsewhere (valueFrom)
            env[item["name"]] = item["value"]
    return env
