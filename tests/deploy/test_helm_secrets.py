"""The Helm chart's credentials: secret values only inside Secret objects, workloads reading them
by reference, hook Secrets for the migration hook, an existing Secret, and the Postgres CA
bundle."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml

from chronos.config import settings
from tests.deploy.helm_support import (
    containers,
    hook_events,
    hook_weight,
    merge,
    render,
    secret_payload,
    secret_refs,
)
from tests.deploy.helm_values import (
    ADMIN_READ_TOKEN,
    ADMIN_TOKEN,
    DB_URL,
    SASL_PASSWORD,
    SASL_USER,
    SCENARIOS,
    SECRET_STRINGS,
    SECRET_VALUES,
    SSL_KEY_PASSWORD,
    deployment,
    migration_job,
    render_error,
)

# ----------------------------------------------------------------------------------------------
# Secrets
# ----------------------------------------------------------------------------------------------


def _encodings(value: str) -> set[str]:
    return {value, base64.b64encode(value.encode()).decode()}


@pytest.mark.parametrize("scenario", ["secrets", "keda-sasl-prometheus", "keda-tls-private-ca"])
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
        "CHRONOS_ADMIN_READ_TOKEN": ADMIN_READ_TOKEN,
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


# ------------------------------------------------------------------------ Kafka TLS


@pytest.mark.parametrize("mutual", [False, True])
def test_kafka_tls_files_are_mounted_and_named_to_every_kafka_client(mutual: bool) -> None:
    tls = {"secretName": "kafka-tls", "caKey": "ca.pem"}
    if mutual:
        tls |= {"certificateKey": "tls.crt", "keyKey": "tls.key"}
    rendered = render({"kafkaTLS": tls, "preflight": {"enabled": True}})
    (deployment,) = rendered.of_kind("Deployment")
    spec = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    items = [i["key"] for i in volumes["kafka-tls"]["secret"]["items"]]
    assert volumes["kafka-tls"]["secret"]["secretName"] == "kafka-tls"
    assert items == (["ca.pem", "tls.crt", "tls.key"] if mutual else ["ca.pem"])
    for container in spec["containers"] + spec["initContainers"]:  # the node and its preflight
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert env["CHRONOS_KAFKA__SSL_CA_LOCATION"] == "/etc/chronos/kafka-tls/ca.pem"
        if mutual:
            assert (
                env["CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION"] == "/etc/chronos/kafka-tls/tls.crt"
            )
            assert env["CHRONOS_KAFKA__SSL_KEY_LOCATION"] == "/etc/chronos/kafka-tls/tls.key"
        else:
            assert "CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION" not in env
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["kafka-tls"] == {
            "name": "kafka-tls",
            "mountPath": "/etc/chronos/kafka-tls",
            "readOnly": True,
        }


def test_no_kafka_tls_by_default_and_a_certificate_needs_its_key() -> None:
    (deployment,) = render().of_kind("Deployment")
    (container,) = containers(deployment)
    assert not any(e["name"].startswith("CHRONOS_KAFKA__SSL") for e in container.get("env", []))
    error = render_error({"kafkaTLS": {"secretName": "k", "certificateKey": "tls.crt"}})
    assert "keyKey" in error
    assert "kafkaTLS" in render_error({"kafkaTLS": {"bogus": "x"}})


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
