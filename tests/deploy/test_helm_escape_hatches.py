"""The chart's escape hatches: extraEnv (any name; CHRONOS_* ones held to the rules of config),
extraEnvFrom, extraVolumes / extraVolumeMounts, sidecars and initContainers."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from chronos.config import settings
from chronos.config.validation import validate
from tests.deploy.helm_support import containers, merge, pod_spec, render
from tests.deploy.helm_values import (
    SCENARIOS,
    chronos_container,
    deployment,
    migration_job,
    pod_environment,
    render_error,
)


def _container(rendered: Any, name: str) -> dict[str, Any]:
    (found,) = [c for c in containers(deployment(rendered)) if c["name"] == name]
    return found


def test_nothing_extra_by_default() -> None:
    spec = pod_spec(deployment(render()))
    assert [c["name"] for c in spec["containers"]] == ["chronos"]
    assert "initContainers" not in spec
    assert [v["name"] for v in spec["volumes"]] == ["tmp"]
    assert "env" not in chronos_container(render())


def test_extra_env_env_from_and_mounts_reach_the_node_and_its_preflight() -> None:
    rendered = render(SCENARIOS["escape-hatches"])
    for name in ("chronos", "preflight"):
        container = _container(rendered, name)
        env = {e["name"]: e for e in container["env"]}
        assert env["AWS_REGION"]["value"] == "eu-west-1"
        assert env["HTTPS_PROXY"]["value"] == "http://proxy.internal:3128"
        assert env["CHRONOS_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "vault-admin"
        # After the chart's own sources, so the chart's ConfigMap and Secret stay the base.
        assert container["envFrom"][-1] == {"configMapRef": {"name": "proxy-settings"}}
        assert {"name": "proxy-certs", "mountPath": "/etc/proxy-ca", "readOnly": True} in (
            container["volumeMounts"]
        )
    volumes = {v["name"]: v for v in pod_spec(deployment(rendered))["volumes"]}
    assert volumes["proxy-certs"] == {"name": "proxy-certs", "secret": {"secretName": "proxy-ca"}}
    assert set(volumes) == {"tmp", "proxy-certs"}


def test_sidecars_run_beside_the_node_and_init_containers_before_the_preflight() -> None:
    spec = pod_spec(deployment(render(SCENARIOS["escape-hatches"])))
    assert [c["name"] for c in spec["containers"]] == ["chronos", "cloud-sql-proxy"]
    assert spec["containers"][1]["args"] == ["--port=5432", "project:region:instance"]
    assert [c["name"] for c in spec["initContainers"]] == ["wait-for-proxy", "preflight"]
    # Without the preflight, the init containers are all there is.
    without = render(merge(SCENARIOS["escape-hatches"], {"preflight": {"enabled": False}}))
    assert [c["name"] for c in pod_spec(deployment(without))["initContainers"]] == [
        "wait-for-proxy"
    ]


def test_the_migration_job_is_left_alone() -> None:
    job = migration_job(render(SCENARIOS["escape-hatches"]))
    names = [e["name"] for e in containers(job)[0]["env"]]
    assert "AWS_REGION" not in names
    assert [c["name"] for c in containers(job)] == ["migrate"]


def test_chronos_settings_given_through_extra_env_load_in_chronos() -> None:
    rendered = render(SCENARIOS["escape-hatches"])
    environ = pod_environment(rendered)
    # Names other than CHRONOS_* reach the process; Chronos ignores them.
    assert environ["AWS_REGION"] == "eu-west-1"
    loaded = validate(settings.load(environ=environ))
    assert loaded.audit_topic == "chronos-audit"


@pytest.mark.parametrize(
    "name", ["AWS_REGION", "HTTPS_PROXY", "no_proxy", "JAVA_TOOL_OPTIONS", "OTEL_SERVICE_NAME"]
)
def test_any_other_name_is_free(name: str) -> None:
    env = chronos_container(render({"extraEnv": [{"name": name, "value": "x"}]}))["env"]
    assert env == [{"name": name, "value": "x"}]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"name": "CHRONOS_HOLDTIME_MS", "value": "1"}, "not a Chronos setting"),
        ({"name": "CHRONOS_TEST_FOO", "value": "1"}, "not a Chronos setting"),
        ({"name": "CHRONOS_NODE_ID", "value": "x"}, "node id"),
        ({"name": "CHRONOS_ADMIN_TOKEN", "value": "plain"}, "is a secret"),
        ({"name": "CHRONOS_DATABASE_URL", "value": "postgresql://u:p@h/d"}, "is a secret"),
        ({"name": "CHRONOS_KAFKA__SASL_PASSWORD", "value": "pw"}, "is a secret"),
        ({"name": "CHRONOS_HTTP_PORT", "value": "9000"}, "belongs in config"),
        ({"name": "CHRONOS_INPUT_TOPIC", "value": "other"}, "belongs in config"),
        ({"name": "CHRONOS_LOG_FORMAT", "value": "text"}, "in config too"),
        ({"name": "PGSSLROOTCERT", "value": "/x"}, "set by the chart"),
    ],
)
def test_chronos_names_follow_the_rules_of_config(entry: dict[str, Any], says: str) -> None:
    message = render_error({"extraEnv": [entry]})
    assert says in message
    assert entry["name"] in message or says == "node id"


def test_a_secret_setting_by_reference_is_accepted() -> None:
    ref = {"secretKeyRef": {"name": "kafka-credentials", "key": "password"}}
    rendered = render({"extraEnv": [{"name": "CHRONOS_KAFKA__SASL_PASSWORD", "valueFrom": ref}]})
    assert chronos_container(rendered)["env"] == [
        {"name": "CHRONOS_KAFKA__SASL_PASSWORD", "valueFrom": ref}
    ]


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"extraVolumes": [{"name": "tmp", "emptyDir": {}}]}, "extraVolumes"),
        ({"extraVolumes": [{"name": "kafka-tls", "emptyDir": {}}]}, "extraVolumes"),
        ({"sidecars": [{"name": "chronos", "image": "x"}]}, "sidecars"),
        ({"initContainers": [{"name": "preflight", "image": "x"}]}, "initContainers"),
    ],
)
def test_the_charts_own_names_are_refused(values: dict[str, Any], says: str) -> None:
    assert says in render_error(values)


@pytest.mark.parametrize(
    "values",
    [
        {"extraEnv": {"AWS_REGION": "eu-west-1"}},  # a map, not a list
        {"extraEnv": [{"value": "x"}]},
        {"extraVolumeMounts": [{"name": "x", "mountPath": "relative"}]},
        {"sidecars": [{"name": "proxy"}]},
        {"initContainers": [{"image": "busybox"}]},
    ],
)
def test_the_schema_refuses_malformed_entries(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)
