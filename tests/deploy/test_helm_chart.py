"""The Helm chart (helm/chronos), rendered offline by Helm's own engine (see helm_support)."""

from __future__ import annotations

import base64
import math
import re
import uuid
from pathlib import Path
from typing import Any, cast

import helm_python as helm
import pytest
import yaml
from helm_support import (
    CHART_DIR,
    KUBE_VERSIONS,
    MINIMAL_VALUES,
    NAMESPACE,
    containers,
    hook_events,
    hook_weight,
    lint,
    merge,
    pod_spec,
    render,
    secret_payload,
    secret_refs,
    validate,
)

from chronos.config import settings

DB_PASSWORD = "s3cr3t-db-pass"
DB_URL = f"postgresql://chronos:{DB_PASSWORD}@postgres.db:5432/chronos?sslmode=require"
ADMIN_TOKEN = "adm1n-t0ken-7f3a9c"
SASL_USER = "chronos-sasl-user"
SASL_PASSWORD = "k4fka-sasl-pw-Q9"
SSL_KEY_PASSWORD = "ssl-k3y-pw-Z1"

SECRET_VALUES = {
    "secrets": {
        "databaseUrl": DB_URL,
        "adminToken": ADMIN_TOKEN,
        "kafkaSaslUsername": SASL_USER,
        "kafkaSaslPassword": SASL_PASSWORD,
        "extra": {"CHRONOS_KAFKA__SSL_KEY_PASSWORD": SSL_KEY_PASSWORD},
    },
    "config": {
        "CHRONOS_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "CHRONOS_KAFKA__SASL_MECHANISMS": "SCRAM-SHA-512",
    },
}
SECRET_STRINGS = (DB_URL, DB_PASSWORD, ADMIN_TOKEN, SASL_USER, SASL_PASSWORD, SSL_KEY_PASSWORD)

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
    return cast(dict[str, Any], container)


def migration_job(rendered: Any) -> dict[str, Any]:
    return rendered.one("Job")  # type: ignore[no-any-return]


def render_error(values: dict[str, Any], *, minimal: bool = True) -> str:
    with pytest.raises(helm.HelmError) as caught:
        render(values, minimal=minimal)
    return str(caught.value)


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


# ----------------------------------------------------------------------------------------------
# Secrets
# ----------------------------------------------------------------------------------------------


def _encodings(value: str) -> set[str]:
    return {value, base64.b64encode(value.encode()).decode()}


@pytest.mark.parametrize("scenario", ["secrets", "keda-sasl-prometheus"])
def test_secret_values_appear_only_inside_secret_objects(scenario: str) -> None:
    rendered = render(SCENARIOS[scenario])
    for manifest in rendered.manifests:
        if manifest["kind"] == "Secret":
            # Inside a Secret, only as values of data (base64) / stringData.
            without_payload = {k: v for k, v in manifest.items() if k not in ("data", "stringData")}
            dumped = yaml.safe_dump(without_payload)
            for secret in SECRET_STRINGS:
                for form in _encodings(secret):
                    assert form not in dumped
            continue
        dumped = yaml.safe_dump(manifest)
        for secret in SECRET_STRINGS:
            for form in _encodings(secret):
                assert form not in dumped, f"{manifest['kind']} leaks {secret!r}"
    for secret in SECRET_STRINGS:
        assert secret not in rendered.notes
    # The chart's Secret really carries them, under the environment variable names.
    payload = secret_payload(rendered.one("Secret", "chronos"))
    assert payload == {
        "CHRONOS_DATABASE_URL": DB_URL,
        "CHRONOS_ADMIN_TOKEN": ADMIN_TOKEN,
        "CHRONOS_KAFKA__SASL_USERNAME": SASL_USER,
        "CHRONOS_KAFKA__SASL_PASSWORD": SASL_PASSWORD,
        "CHRONOS_KAFKA__SSL_KEY_PASSWORD": SSL_KEY_PASSWORD,
    }


def test_workloads_take_secrets_only_by_reference() -> None:
    rendered = render(SECRET_VALUES)
    secret_envs = {o.env for o in settings.OPTIONS if o.secret} | set(
        secret_payload(rendered.one("Secret", "chronos"))
    )
    for workload in rendered.of_kind("Deployment") + rendered.of_kind("Job"):
        for container in containers(workload):
            for env in container.get("env", []):
                if env["name"] in secret_envs:
                    assert "value" not in env and "secretKeyRef" in env["valueFrom"], env
            for source in container.get("envFrom", []):
                assert set(source) <= {"configMapRef", "secretRef"}
    for config_map in rendered.of_kind("ConfigMap"):
        assert not set(config_map["data"]) & secret_envs


@pytest.mark.parametrize(
    "key",
    [
        "CHRONOS_DATABASE_URL",
        "CHRONOS_ADMIN_TOKEN",
        "CHRONOS_KAFKA__SASL_PASSWORD",
        "CHRONOS_KAFKA__SASL_USERNAME",
        "CHRONOS_KAFKA__SSL_KEY_PASSWORD",
        "CHRONOS_KAFKA__SASL_OAUTHBEARER_CLIENT_SECRET",
        "CHRONOS_PRODUCER__SASL_JAAS_CONFIG",
    ],
)
def test_credentials_in_config_are_refused(key: str) -> None:
    message = render_error({"config": {key: "postgresql://x:y@z/db"}})
    assert key in message and "secret" in message.lower()


def test_every_secret_reference_exists_when_its_reader_starts() -> None:
    """Hooks run before the release's ordinary resources exist, so a hook Job must not read the
    chart's ordinary Secret: it needs a hook Secret of a lower weight (or a pre-existing one)."""
    rendered = render(SECRET_VALUES)
    secrets = {s["metadata"]["name"]: s for s in rendered.of_kind("Secret")}
    for workload in rendered.of_kind("Deployment") + rendered.of_kind("Job"):
        for name in set(secret_refs(workload)):
            assert name in secrets, f"{workload['kind']} reads missing Secret {name}"
            secret = secrets[name]
            if hook_events(workload):
                assert hook_events(workload) <= hook_events(secret)
                assert hook_weight(secret) < hook_weight(workload)
            else:
                assert not hook_events(secret), "ordinary workload reads a short-lived hook Secret"
    job_refs = list(secret_refs(migration_job(rendered)))
    assert job_refs == ["chronos-migrate"]
    assert secret_payload(secrets["chronos-migrate"]) == {"CHRONOS_DATABASE_URL": DB_URL}


def test_existing_secret_is_used_everywhere_and_nothing_is_created() -> None:
    rendered = render(SCENARIOS["existing-secret"])
    assert rendered.of_kind("Secret") == []
    assert set(secret_refs(deployment(rendered))) == {"chronos-credentials"}
    job_env = {e["name"]: e for e in containers(migration_job(rendered))[0]["env"]}
    assert job_env["CHRONOS_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "chronos-credentials",
        "key": "CHRONOS_DATABASE_URL",
    }
    assert (
        "chronos/secret-fingerprint"
        not in deployment(rendered)["spec"]["template"]["metadata"]["annotations"]
    )
    assert "rollout restart" in rendered.notes


def test_existing_secret_excludes_inline_secrets() -> None:
    message = render_error({"secrets": {"existingSecret": "mine"}})  # databaseUrl from MINIMAL
    assert "existingSecret" in message


def test_migration_job_gets_only_the_database_url() -> None:
    rendered = render(merge(SECRET_VALUES, {"config": {"CHRONOS_LOG_LEVEL": "DEBUG"}}))
    (container,) = containers(migration_job(rendered))
    assert "envFrom" not in container
    assert {e["name"] for e in container["env"]} == {
        "CHRONOS_DATABASE_URL",
        "CHRONOS_LOG_LEVEL",
        "CHRONOS_LOG_FORMAT",
    }


def test_secret_change_rolls_the_pods_without_exposing_a_plain_hash() -> None:
    def annotations(values: dict[str, Any]) -> dict[str, str]:
        rendered = render(values)
        return deployment(rendered)["spec"]["template"]["metadata"]["annotations"]  # type: ignore[no-any-return]

    base = annotations(SECRET_VALUES)
    rotated = annotations(merge(SECRET_VALUES, {"secrets": {"kafkaSaslPassword": "rotated"}}))
    reconfigured = annotations(merge(SECRET_VALUES, {"config": {"CHRONOS_LOG_LEVEL": "DEBUG"}}))
    assert base["chronos/secret-fingerprint"] != rotated["chronos/secret-fingerprint"]
    assert base["checksum/config"] == rotated["checksum/config"]
    assert base["checksum/config"] != reconfigured["checksum/config"]
    assert base["chronos/secret-fingerprint"] == reconfigured["chronos/secret-fingerprint"]


# ----------------------------------------------------------------------------------------------
# Configuration reaches Chronos as an environment it accepts
# ----------------------------------------------------------------------------------------------


def _pod_environment(rendered: Any) -> dict[str, str]:
    """The CHRONOS_* environment a node container starts with (envFrom ConfigMap + Secret)."""
    env: dict[str, str] = {}
    for source in chronos_container(rendered)["envFrom"]:
        if "configMapRef" in source:
            env.update(rendered.one("ConfigMap", source["configMapRef"]["name"])["data"])
        else:
            env.update(secret_payload(rendered.one("Secret", source["secretRef"]["name"])))
    for item in chronos_container(rendered).get("env", []):
        env[item["name"]] = item["value"]
    return env


@pytest.mark.parametrize("scenario", ["minimal", "secrets", "tuned"])
def test_rendered_environment_loads_in_chronos_settings(scenario: str) -> None:
    rendered = render(SCENARIOS[scenario])
    loaded = settings.load(environ=_pod_environment(rendered)).validate()
    assert loaded.http_port == chronos_container(rendered)["ports"][0]["containerPort"]
    assert loaded.database_url.reveal().startswith("postgresql://")


def test_settings_and_passthrough_properties_arrive_typed() -> None:
    rendered = render(merge(SCENARIOS["tuned"], SECRET_VALUES))
    loaded = settings.load(environ=_pod_environment(rendered)).validate()
    assert loaded.max_in_flight == 1_000_000  # not "1e+06": numbers are printed as integers
    assert loaded.shutdown_timeout_ms == 45000
    assert loaded.input_topic == "orders.delay"
    assert loaded.dead_letter_topic == ""
    assert isinstance(loaded.kafka_properties["sasl.password"], settings.Secret)
    assert isinstance(loaded.kafka_properties["ssl.key.password"], settings.Secret)
    assert settings.reveal_properties(loaded.kafka_properties) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": SASL_USER,
        "sasl.password": SASL_PASSWORD,
        "ssl.key.password": SSL_KEY_PASSWORD,
    }
    assert loaded.admin_token.reveal() == ADMIN_TOKEN


def test_chart_accepts_every_non_secret_chronos_setting() -> None:
    """The chart's list of settings (it refuses unknown ones) matches chronos/config/settings.py."""
    for option in settings.OPTIONS:
        if option.secret:
            continue
        if option.name == "node_id":
            assert "node id" in render_error({"config": {option.env: str(uuid.uuid4())}})
            continue
        render({"config": {option.env: str(option.default) or "x"}})


@pytest.mark.parametrize("key", ["CHRONOS_HOLDTIME_MS", "CHRONOS_TEST_FOO", "CHRONOS_KAFKA_SASL_X"])
def test_unknown_settings_are_refused(key: str) -> None:
    assert "not a Chronos setting" in render_error({"config": {key: "1"}})


def test_pods_get_no_service_link_variables() -> None:
    # A Service named chronos would inject CHRONOS_PORT, CHRONOS_SERVICE_HOST, ... which Chronos
    # rejects as unknown settings.
    rendered = render()
    assert pod_spec(deployment(rendered))["enableServiceLinks"] is False
    assert pod_spec(migration_job(rendered))["enableServiceLinks"] is False


def test_node_id_is_never_shared() -> None:
    rendered = render(SCENARIOS["tuned"])
    assert "CHRONOS_NODE_ID" not in _pod_environment(rendered)


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
    env = _pod_environment(rendered)
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


# ----------------------------------------------------------------------------------------------
# Migration hook
# ----------------------------------------------------------------------------------------------


def test_migration_job_is_a_pre_install_pre_upgrade_hook() -> None:
    job = migration_job(render())
    annotations = job["metadata"]["annotations"]
    assert hook_events(job) == {"pre-install", "pre-upgrade"}
    assert set(annotations["helm.sh/hook-delete-policy"].split(",")) == {
        "before-hook-creation",
        "hook-succeeded",
    }
    (container,) = containers(job)
    assert container["args"] == ["migrate"]
    assert pod_spec(job)["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] >= 0
    assert job["spec"]["activeDeadlineSeconds"] > 0


def test_migration_job_does_not_need_release_resources() -> None:
    """At pre-install only hooks exist: the Job must not name the chart's ServiceAccount."""
    rendered = render()
    assert "serviceAccountName" not in pod_spec(migration_job(rendered))
    assert pod_spec(deployment(rendered))["serviceAccountName"] == "chronos"
    tuned = render(
        SCENARIOS["existing-secret"] | {"serviceAccount": {"create": False, "name": "ci"}}
    )
    assert pod_spec(migration_job(tuned))["serviceAccountName"] == "ci"


def test_only_the_migration_objects_are_hooks() -> None:
    rendered = render(SCENARIOS["keda-sasl-prometheus"])
    hooks = sorted((m["kind"], m["metadata"]["name"]) for m in rendered.manifests if hook_events(m))
    assert hooks == [("Job", "chronos-migrate"), ("Secret", "chronos-migrate")]


def test_migrations_can_be_disabled() -> None:
    rendered = render(SCENARIOS["tuned"])
    assert "Job" not in rendered.kinds()
    assert all(not hook_events(m) for m in rendered.manifests)


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


# ------------------------------------------------------------------------ Postgres TLS and roles


@pytest.mark.parametrize("source", ["secretName", "configMapName"])
def test_a_postgres_ca_bundle_is_mounted_for_verify_full(source: str) -> None:
    rendered = render({"postgresCA": {source: "pg-ca", "key": "root.crt"}})
    for workload in rendered.of_kind("Deployment") + rendered.of_kind("Job"):
        (container,) = containers(workload)
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert env["PGSSLROOTCERT"] == "/etc/chronos/postgres-ca/root.crt"
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["postgres-ca"]["mountPath"] == "/etc/chronos/postgres-ca"
        assert mounts["postgres-ca"]["readOnly"] is True
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        kind = "secret" if source == "secretName" else "configMap"
        ref = volumes["postgres-ca"][kind]
        assert ref.get("secretName", ref.get("name")) == "pg-ca"
        assert ref["items"] == [{"key": "root.crt", "path": "root.crt"}]


def test_no_ca_bundle_by_default_and_never_two_sources() -> None:
    rendered = render()
    for workload in rendered.of_kind("Deployment") + rendered.of_kind("Job"):
        (container,) = containers(workload)
        assert "PGSSLROOTCERT" not in {e["name"] for e in container.get("env", [])}
    error = render_error({"postgresCA": {"secretName": "a", "configMapName": "b"}})
    assert "not both" in error
    assert "postgresCA" in render_error({"postgresCA": {"bogus": "x"}})


def test_the_migration_job_alone_gets_the_migration_url() -> None:
    owner = "postgresql://owner:pw@db:5432/chronos"
    rendered = render({"secrets": {"databaseUrl": DB_URL, "migrationDatabaseUrl": owner}})
    (job,) = rendered.of_kind("Job")
    (container,) = containers(job)
    env = {e["name"]: e for e in container["env"]}
    ref = env["CHRONOS_MIGRATION_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref["key"] == "CHRONOS_MIGRATION_DATABASE_URL"
    hook_secrets = [s for s in rendered.of_kind("Secret") if s["metadata"]["name"] == ref["name"]]
    assert secret_payload(hook_secrets[0])["CHRONOS_MIGRATION_DATABASE_URL"] == owner
    assert owner not in str(rendered.one("Secret", "chronos"))  # the pods never get it
