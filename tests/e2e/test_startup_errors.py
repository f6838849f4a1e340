"""Start-up failures that are the operator's to fix stop ``chronos run`` with status 2 and a
message naming the setting — never a Python traceback."""

from __future__ import annotations

import socket

import pytest

from tests.e2e.test_cli_e2e import chronos, node_env
from tests.support import Topics

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def test_an_http_port_in_use_stops_start_up_naming_the_setting(
    migrated_database_url: str, kafka_bootstrap: str, topics: Topics
) -> None:
    """The second node on a host with default settings: its HTTP port is taken."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = node_env(migrated_database_url, kafka_bootstrap, topics)
        env.update({"CHRONOS_HTTP_HOST": "127.0.0.1", "CHRONOS_HTTP_PORT": str(port)})
        result = chronos("run", env=env, timeout=60)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "CHRONOS_HTTP_PORT" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr[-2000:]


def test_an_http_host_that_is_not_this_machines_stops_start_up_naming_it(
    migrated_database_url: str, kafka_bootstrap: str, topics: Topics
) -> None:
    env = node_env(migrated_database_url, kafka_bootstrap, topics)
    env.update({"CHRONOS_HTTP_HOST": "192.0.2.1", "CHRONOS_HTTP_PORT": "8080"})  # TEST-NET-1
    result = chronos("run", env=env, timeout=60)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "CHRONOS_HTTP_HOST" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr[-2000:]


def test_a_sasl_setting_the_broker_refuses_stops_start_up_naming_it(
    migrated_database_url: str, kafka_bootstrap: str, topics: Topics
) -> None:
    """Not waited for as an outage: the broker answered and refused the client's settings."""
    env = node_env(migrated_database_url, kafka_bootstrap, topics)
    env.update(
        {
            "CHRONOS_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "CHRONOS_KAFKA__SASL_MECHANISMS": "SCRAM-SHA-256",
            "CHRONOS_KAFKA__SASL_USERNAME": "chronos",
            "CHRONOS_KAFKA__SASL_PASSWORD": "s3cret-never-printed",
        }
    )
    result = chronos("run", env=env, timeout=90)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "CHRONOS_KAFKA__SASL_MECHANISMS" in result.stderr
    assert "s3cret-never-printed" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr, result.stderr[-2000:]


def test_a_database_that_refuses_the_node_stops_start_up_naming_the_url(
    database_url: str, kafka_bootstrap: str, topics: Topics
) -> None:
    """A database that answers but has no schema is the operator's to fix, not an outage."""
    env = node_env(database_url, kafka_bootstrap, topics)
    result = chronos("run", env=env, timeout=90)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "CHRONOS_DATABASE_URL" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
