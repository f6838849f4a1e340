"""The Helm chart's configuration reaches Chronos as an environment its settings accept."""

from __future__ import annotations

import re
import uuid

import pytest

from chronos.config import settings
from chronos.config.validation import validate
from tests.deploy.helm_support import (
    CHART_DIR,
    merge,
    pod_spec,
    render,
)
from tests.deploy.helm_values import (
    ADMIN_READ_TOKEN,
    ADMIN_TOKEN,
    SASL_PASSWORD,
    SASL_USER,
    SCENARIOS,
    SECRET_VALUES,
    SSL_KEY_PASSWORD,
    chronos_container,
    deployment,
    migration_job,
    pod_environment,
    render_error,
)

# ----------------------------------------------------------------------------------------------
# Configuration reaches Chronos as an environment it accepts
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scenario", ["minimal", "secrets", "tuned", "escape-hatches", "admin-port-network-policy"]
)
def test_rendered_environment_loads_in_chronos_settings(scenario: str) -> None:
    rendered = render(SCENARIOS[scenario])
    loaded = validate(settings.load(environ=pod_environment(rendered)))
    assert loaded.http_port == chronos_container(rendered)["ports"][0]["containerPort"]
    assert loaded.database_url.reveal().startswith("postgresql://")


def test_settings_and_passthrough_properties_arrive_typed() -> None:
    rendered = render(merge(SCENARIOS["tuned"], SECRET_VALUES))
    loaded = validate(settings.load(environ=pod_environment(rendered)))
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
    assert loaded.admin_read_token.reveal() == ADMIN_READ_TOKEN


def test_the_charts_lists_of_settings_are_chronos_declarations() -> None:
    """The chart keeps two lists (it refuses an unknown setting, and a secret one outside
    ``secrets``): each must be exactly what chronos/config declares, or a setting added there
    cannot be set through the chart at all."""
    helpers = (CHART_DIR / "templates" / "_helpers.tpl").read_text()

    def listed(name: str) -> set[str]:
        body = helpers.split(f'define "{name}" -}}}}', 1)[1].split("{{- end }}", 1)[0]
        return set(re.findall(r"CHRONOS_[A-Z0-9_]+", body))

    assert listed("chronos.knownSettings") == {option.env for option in settings.OPTIONS}
    assert listed("chronos.secretSettings") == {o.env for o in settings.OPTIONS if o.secret}


def test_chart_accepts_every_non_secret_chronos_setting() -> None:
    """The chart's list of settings (it refuses unknown ones) matches chronos/config/settings.py."""
    for option in settings.OPTIONS:
        if option.secret:
            continue
        if option.name == "node_id":
            assert "node id" in render_error({"config": {option.env: str(uuid.uuid4())}})
            continue
        if option.name == "admin_port":  # admin.separatePort and admin.port set it
            assert "admin.separatePort" in render_error({"config": {option.env: "8081"}})
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
    assert "CHRONOS_NODE_ID" not in pod_environment(rendered)
