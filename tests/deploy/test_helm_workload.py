"""The Helm chart's Deployment: its shape, probes, security context, scheduling, graceful shutdown
and disruption budget."""

from __future__ import annotations

import math
from typing import Any

import pytest

from chronos.config import settings
from tests.deploy.helm_support import (
    containers,
    pod_spec,
    render,
)
from tests.deploy.helm_values import (
    SCENARIOS,
    chronos_container,
    deployment,
    migration_job,
    pod_environment,
    render_error,
)

# ----------------------------------------------------------------------------------------------
# Deployment shape
# ----------------------------------------------------------------------------------------------


def test_replicas_default_and_override() -> None:
    assert deployment(render())["spec"]["replicas"] == 2
    assert deployment(render({"replicaCount": 3}))["spec"]["replicas"] == 3


@pytest.mark.parametrize("scenario", ["hpa", "keda-lag"])
def test_autoscaled_deployment_leaves_replicas_to_the_autoscaler(scenario: str) -> None:
    assert "replicas" not in deployment(render(SCENARIOS[scenario]))["spec"]


def test_container_runs_chronos_run() -> None:
    container = chronos_container(render())
    assert container["args"] == ["run"]
    assert "command" not in container  # the image's ENTRYPOINT is chronos
    assert container["image"] == "chronos:0.1.0"
    assert chronos_container(render(SCENARIOS["tuned"]))["image"] == (
        "registry.example/chronos@sha256:" + "a" * 64
    )


def test_rolling_update_never_drops_below_desired() -> None:
    strategy = deployment(render())["spec"]["strategy"]
    assert strategy == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }


@pytest.mark.parametrize("workload", ["Deployment", "Job"])
def test_security_context(workload: str) -> None:
    rendered = render()
    manifest = rendered.one(workload)
    pod = pod_spec(manifest)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    for container in containers(manifest):
        sc = container["securityContext"]
        assert sc["runAsNonRoot"] is True
        assert sc["runAsUser"] == 10001
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        # The only writable path is an emptyDir at /tmp.
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts == {"/tmp": "tmp"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes["tmp"]


def test_probes() -> None:
    container = chronos_container(render())
    assert container["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/health/live", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/health/live", "port": "http"}


def test_http_port_follows_the_setting() -> None:
    rendered = render(SCENARIOS["tuned"])
    assert chronos_container(rendered)["ports"][0]["containerPort"] == 9090
    assert rendered.one("ConfigMap")["data"]["CHRONOS_HTTP_PORT"] == "9090"
    assert rendered.one("Service")["spec"]["ports"][0]["targetPort"] == "http"
    assert "port-forward deployment/chronos 9090:9090" in rendered.notes


@pytest.mark.parametrize("port", [0, 70000, "http"])
def test_http_port_must_be_served(port: Any) -> None:
    assert "CHRONOS_HTTP_PORT" in render_error({"config": {"CHRONOS_HTTP_PORT": port}})


def test_resources_are_set() -> None:
    resources = chronos_container(render())["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    assert resources["limits"]["memory"]


def test_default_anti_affinity_is_preferred_on_hostname() -> None:
    rendered = render()
    anti = pod_spec(deployment(rendered))["affinity"]["podAntiAffinity"]
    assert list(anti) == ["preferredDuringSchedulingIgnoredDuringExecution"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert (
        term["podAffinityTerm"]["labelSelector"]["matchLabels"]
        == (deployment(rendered)["spec"]["selector"]["matchLabels"])
    )


def test_required_anti_affinity() -> None:
    rendered = render(SCENARIOS["required-anti-affinity-3-replicas"])
    anti = pod_spec(deployment(rendered))["affinity"]["podAntiAffinity"]
    assert list(anti) == ["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == (
        "kubernetes.io/hostname"
    )
    assert deployment(rendered)["spec"]["replicas"] == 3
    assert "Pending" in rendered.notes


def test_affinity_override_and_none() -> None:
    custom = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "pool", "operator": "In", "values": ["scheduler"]}
                        ]
                    }
                ]
            }
        }
    }
    assert pod_spec(deployment(render({"affinity": custom})))["affinity"] == custom
    assert "affinity" not in pod_spec(deployment(render(SCENARIOS["tuned"])))


def test_selectors_pick_the_nodes_but_not_the_migration_pods() -> None:
    rendered = render(SCENARIOS["service-monitor"])
    selector = deployment(rendered)["spec"]["selector"]["matchLabels"]
    pod_labels = deployment(rendered)["spec"]["template"]["metadata"]["labels"]
    job_labels = migration_job(rendered)["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    assert not selector.items() <= job_labels.items()
    assert rendered.one("Service")["spec"]["selector"] == selector
    assert rendered.one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == selector
    monitor = rendered.one("ServiceMonitor")
    service = rendered.one("Service")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["metadata"]["labels"]["team"] == "x"


# ----------------------------------------------------------------------------------------------
# Graceful shutdown
# ----------------------------------------------------------------------------------------------


def _drain_seconds(rendered: Any) -> float:
    env = pod_environment(rendered)
    option = settings.OPTIONS_BY_NAME["shutdown_timeout_ms"]
    return int(env.get(option.env, option.default)) / 1000


@pytest.mark.parametrize("scenario", ["minimal", "tuned"])
def test_termination_grace_outlasts_the_drain(scenario: str) -> None:
    rendered = render(SCENARIOS[scenario])
    grace = pod_spec(deployment(rendered))["terminationGracePeriodSeconds"]
    assert grace >= math.ceil(_drain_seconds(rendered)) + 5


def test_too_short_grace_period_refuses_to_render() -> None:
    message = render_error(
        {"config": {"CHRONOS_SHUTDOWN_TIMEOUT_MS": 60000}, "terminationGracePeriodSeconds": 30}
    )
    assert "terminationGracePeriodSeconds" in message and "65" in message
    # Exactly drain + margin is enough (and a drain of 10.5 s rounds up to 11 s).
    render({"config": {"CHRONOS_SHUTDOWN_TIMEOUT_MS": 60000}, "terminationGracePeriodSeconds": 65})
    render({"config": {"CHRONOS_SHUTDOWN_TIMEOUT_MS": 10500}, "terminationGracePeriodSeconds": 16})
    assert "16" in render_error(
        {"config": {"CHRONOS_SHUTDOWN_TIMEOUT_MS": 10500}, "terminationGracePeriodSeconds": 15}
    )


# ----------------------------------------------------------------------------------------------
# Disruption budget
# ----------------------------------------------------------------------------------------------


def test_pdb_default_min_available_one() -> None:
    spec = render().one("PodDisruptionBudget")["spec"]
    assert spec["minAvailable"] == 1
    assert "maxUnavailable" not in spec


def test_pdb_alternatives() -> None:
    spec = render(SCENARIOS["tuned"]).one("PodDisruptionBudget")["spec"]
    assert spec["maxUnavailable"] == 1 and "minAvailable" not in spec
    spec = render({"podDisruptionBudget": {"minAvailable": "50%"}}).one("PodDisruptionBudget")[
        "spec"
    ]
    assert spec["minAvailable"] == "50%"
    assert "not both" in render_error({"podDisruptionBudget": {"maxUnavailable": 1}})
    assert "PodDisruptionBudget" not in render({"podDisruptionBudget": {"enabled": False}}).kinds()


def test_single_replica_warns() -> None:
    assert "WARNING" in render({"replicaCount": 1}).notes
    assert "WARNING" not in render().notes


def test_the_preflight_init_container_runs_chronos_check_with_the_pods_configuration() -> None:
    assert "initContainers" not in pod_spec(deployment(render()))  # off by default
    spec = pod_spec(
        deployment(render({"preflight": {"enabled": True}, "postgresCA": {"secretName": "pg-ca"}}))
    )
    (init,) = spec["initContainers"]
    node = chronos_container_of(spec)
    assert init["args"] == ["check"] and init["image"] == node["image"]
    assert init["envFrom"] == node["envFrom"]  # the same settings and secrets as the node
    assert init["securityContext"] == node["securityContext"]
    assert {m["mountPath"] for m in init["volumeMounts"]} == {
        m["mountPath"] for m in node["volumeMounts"]
    }
    assert [e["name"] for e in init["env"]] == [
        e["name"] for e in node.get("env", []) if e["name"] != "CHRONOS_GROUP_INSTANCE_ID"
    ]


def chronos_container_of(spec: dict[str, Any]) -> dict[str, Any]:
    node: dict[str, Any] = next(c for c in spec["containers"] if c["name"] == "chronos")
    return node
