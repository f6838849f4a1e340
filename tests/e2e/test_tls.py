"""Chronos over encrypted connections only, every client a real process: Apache Kafka on its own
TLS listener (client certificates required) and its SASL_SSL listener (SCRAM-SHA-512 users made
when its storage was formatted), with the standard authorizer on (``secured_kafka``, one broker
for the session), and Postgres accepting TLS connections only (``hostssl`` rules alone),
verified with ``sslmode=verify-full``.

``chronos migrate``, ``chronos check``, two ``chronos run`` nodes, ``chronos schedule``,
``chronos import``, ``chronos tail`` and ``chronos admin`` run through each listener; a wrong
CA, a certificate for another host, an expired certificate, a missing client certificate, a
wrong password and an unknown user stop start-up with exit 2 naming the setting; a plaintext
client reaches nothing.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from chronos.embedded.process import free_port
from chronos.embedded.tls import Pki
from chronos.kafka.startup import (
    CERTIFICATE_EXPIRED,
    CERTIFICATE_OTHER_HOST,
    CERTIFICATE_UNTRUSTED,
    CLIENT_CERTIFICATE_REFUSED,
    SASL_REFUSED,
    TLS_HANDSHAKE_FAILED,
)
from chronos.store.postgres.session import (
    DATABASE_TLS_FAILED,
    DATABASE_TLS_REQUIRED,
    connection_refusal,
)
from tests.e2e.test_cli_e2e import NodeProcess, chronos
from tests.support import Topics
from tests.support.polling import eventually
from tests.support.tls import (
    NODE_USER,
    SecuredBroker,
    TlsBroker,
    tls_postgres,
    verify_full_url,
)

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

TOKEN = "tls-admin-token"


@pytest.fixture(scope="module")
def pki(tls_pki: Pki) -> Pki:
    return tls_pki


@pytest.fixture(scope="module")
def mutual_broker(secured_kafka: SecuredBroker) -> TlsBroker:
    """The broker's TLS listener, with the client certificate."""
    return secured_kafka.tls()


@pytest.fixture(scope="module")
def tls_server(pki: Pki) -> Iterator[str]:
    with tls_postgres(pki) as url:
        yield url


@pytest.fixture
def tls_database(tls_server: str, pki: Pki) -> str:
    """A fresh database on the TLS-only server; its verify-full URL."""
    name = f"tls_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(tls_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # the test's own name
    return verify_full_url(tls_server, pki, name)


@pytest.fixture(scope="module")
def migrated_tls_database(tls_server: str, pki: Pki, mutual_broker: TlsBroker) -> str:
    """A database on the TLS-only server migrated once by ``chronos migrate`` over TLS, for the
    tests of what start-up refuses (they only need a schema to get past it); its verify-full
    URL."""
    name = f"tls_migrated_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(tls_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')  # the test's own name
    url = verify_full_url(tls_server, pki, name)
    env = {"CHRONOS_DATABASE_URL": url, **mutual_broker.env()}
    migrated = chronos("migrate", env=env, timeout=120)
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    return url


@pytest.fixture
def tls_topics(mutual_broker: TlsBroker) -> Topics:
    suffix = uuid.uuid4().hex[:8]
    topics = Topics(f"tls-in-{suffix}", f"tls-out-{suffix}", f"tls-dlq-{suffix}")
    mutual_broker.create_topics({topics.input: 2, topics.output: 1, topics.dead_letter: 1})
    return topics


def tls_env(database_url: str, broker: TlsBroker, topics: Topics) -> dict[str, str]:
    return {
        "CHRONOS_DATABASE_URL": database_url,
        **broker.env(),
        "CHRONOS_INPUT_TOPIC": topics.input,
        "CHRONOS_OUTPUT_TOPIC": topics.output,
        "CHRONOS_DEAD_LETTER_TOPIC": topics.dead_letter,
        "CHRONOS_CONSUMER_GROUP": f"{topics.input}-group",
        "CHRONOS_HTTP_PORT": "0",
        "CHRONOS_LOG_FORMAT": "json",
        "CHRONOS_SHUTDOWN_TIMEOUT_MS": "8000",
        "CHRONOS_ADMIN_TOKEN": TOKEN,
    }


# ------------------------------------------------------------------ nothing falls back


def test_the_broker_and_postgres_refuse_plaintext(
    secured_kafka: SecuredBroker, mutual_broker: TlsBroker, tls_server: str, pki: Pki
) -> None:
    """The proof that the other tests carry their bytes over TLS: without the settings, a
    client reaches neither server on any of their ports (no silent fallback to plaintext)."""
    for listener in secured_kafka.ports:
        plain = AdminClient(
            {
                "bootstrap.servers": secured_kafka.address(listener),
                "socket.connection.setup.timeout.ms": 3000,
            }
        )
        with pytest.raises(KafkaException):
            plain.list_topics(timeout=2)
    no_client_cert = {
        k: v for k, v in mutual_broker.client_settings().items() if "certificate" not in k
    }
    no_client_cert = {k: v for k, v in no_client_cert.items() if k != "ssl.key.location"}
    with pytest.raises(KafkaException):
        AdminClient(no_client_cert).list_topics(timeout=5)
    assert AdminClient(mutual_broker.client_settings()).list_topics(timeout=10).brokers
    assert AdminClient(secured_kafka.scram().client_settings()).list_topics(timeout=10).brokers
    url = verify_full_url(tls_server, pki)
    with pytest.raises(psycopg.OperationalError) as plaintext:
        psycopg.connect(url.replace("sslmode=verify-full", "sslmode=disable"), connect_timeout=5)
    assert connection_refusal(plaintext.value) == DATABASE_TLS_REQUIRED, plaintext.value
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
    assert row == (True,)


# ------------------------------------------------------------------ the whole system


@pytest.mark.parametrize("listener", ["TLS", "SCRAM"])
def test_nodes_and_the_cli_run_over_mutual_tls_or_scram_and_verify_full(
    listener: str,
    tls_database: str,
    secured_kafka: SecuredBroker,
    tls_topics: Topics,
    tmp_path: Path,
    run_node: Callable[..., NodeProcess],
) -> None:
    """Through the TLS listener with the client certificate, or the SASL_SSL one as a SCRAM
    user; the authorizer on, the node's principal allowed its topics and group."""
    access = secured_kafka.tls() if listener == "TLS" else secured_kafka.scram()
    env = tls_env(tls_database, access, tls_topics)
    if listener == "SCRAM":
        assert env["CHRONOS_KAFKA__SASL_MECHANISMS"] == "SCRAM-SHA-512"
    migrated = chronos("migrate", env=env, timeout=120)
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    checked = chronos("check", "--json", env=env, timeout=120)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    assert {c["status"] for c in json.loads(checked.stdout)} == {"ok"}, checked.stdout

    ports = [free_port(), free_port()]
    nodes: list[NodeProcess] = [
        run_node(env={**env, "CHRONOS_HTTP_PORT": str(port)}) for port in ports
    ]
    for node in nodes:
        assert node.wait_for_event("node_started", 60), node.output()

    scheduled = chronos("schedule", "--in", "3", "--count", "5", "--key", "k", env=env)
    assert scheduled.returncode == 0, scheduled.stderr[-2000:]
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"id": f"imported-{i}", "delay": 3, "value": f"imported-{i}"}) + "\n"
            for i in range(5)
        )
    )
    imported = chronos("import", str(rows), env=env, timeout=120)
    assert imported.returncode == 0, imported.stderr[-2000:]

    tailed = chronos("tail", "--from-beginning", "--max", "10", env=env, timeout=120)
    assert tailed.returncode == 0, tailed.stderr[-2000:]
    fired = tailed.stdout.splitlines()
    assert sum("value=imported-" in line for line in fired) == 5, tailed.stdout
    assert sum("key=k value=hello from chronos" in line for line in fired) == 5, tailed.stdout

    admin_env = {"CHRONOS_ADMIN_URL": f"http://127.0.0.1:{ports[0]}", "CHRONOS_ADMIN_TOKEN": TOKEN}
    stats = chronos("admin", "stats", "--json", env=admin_env)
    assert stats.returncode == 0, stats.stderr[-2000:]
    assert eventually(
        lambda: (
            json.loads(chronos("admin", "stats", "--json", env=admin_env).stdout)["waiting"] == 0
        ),
        timeout=30,
    ), stats.stdout
    for node in nodes:
        assert node.proc.poll() is None, node.output()
        assert "Traceback" not in node.output()


# ------------------------------------------------------------------ what the operator must fix


REFUSED_WITHIN_S = 30.0
"""A refused setting stops start-up in seconds (the process's own start included, on a busy
machine), not after the broker-wait's minutes."""


def refused(env: dict[str, str]) -> tuple[int, str]:
    started = time.monotonic()
    result = chronos("run", env=env, timeout=120)
    elapsed = time.monotonic() - started
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert elapsed < REFUSED_WITHIN_S, f"{elapsed:.1f} s: {result.stderr[-3000:]}"
    return result.returncode, result.stderr


SASL_SETTINGS = "CHRONOS_KAFKA__SASL_PASSWORD"


@pytest.mark.parametrize(
    ("case", "setting", "error"),
    [
        ("wrong CA", "CHRONOS_KAFKA__SSL_CA_LOCATION", CERTIFICATE_UNTRUSTED),
        # The broker's TLS alert differs by JDK ("bad certificate", "certificate required"):
        # what Chronos promises is its own reason and the setting.
        (
            "missing client certificate",
            "CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION",
            CLIENT_CERTIFICATE_REFUSED,
        ),
        (
            "another host's certificate",
            "CHRONOS_KAFKA__SSL_CA_LOCATION",
            CERTIFICATE_OTHER_HOST,
        ),
        ("expired certificate", "CHRONOS_KAFKA__SSL_CA_LOCATION", CERTIFICATE_EXPIRED),
        # Every CA setting librdkafka takes: the system store, a directory, PEM text.
        ("system CA store", "CHRONOS_KAFKA__SSL_CA_LOCATION", CERTIFICATE_UNTRUSTED),
        ("CA directory", "CHRONOS_KAFKA__SSL_CA_LOCATION", CERTIFICATE_UNTRUSTED),
        ("expired, CA as PEM text", "CHRONOS_KAFKA__SSL_CA_PEM", CERTIFICATE_EXPIRED),
        # SCRAM-SHA-512 on the SASL_SSL listener
        ("wrong password", SASL_SETTINGS, SASL_REFUSED),
        ("unknown user", "CHRONOS_KAFKA__SASL_USERNAME", SASL_REFUSED),
        ("SCRAM, wrong CA", "CHRONOS_KAFKA__SSL_CA_LOCATION", CERTIFICATE_UNTRUSTED),
    ],
)
def test_a_kafka_tls_setting_the_broker_refuses_stops_start_up(
    case: str,
    setting: str,
    error: str,
    migrated_tls_database: str,
    secured_kafka: SecuredBroker,
    tls_topics: Topics,
    pki: Pki,
) -> None:
    """Fast (no retry loop), exit 2, the setting and Chronos's reason named (the TLS refusal and
    why the certificate is not trusted, or the SASL refusal), no secret printed."""
    access = secured_kafka.scram() if case in SCRAM_CASES else secured_kafka.tls()
    env = tls_env(migrated_tls_database, access, tls_topics)
    if case in ("wrong CA", "SCRAM, wrong CA"):
        env["CHRONOS_KAFKA__SSL_CA_LOCATION"] = str(pki.other_ca)
    elif case == "missing client certificate":
        del env["CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION"]
        del env["CHRONOS_KAFKA__SSL_KEY_LOCATION"]
    elif case == "system CA store":
        env["CHRONOS_KAFKA__SSL_CA_LOCATION"] = "probe"  # the test CA is not in it
    elif case == "CA directory":
        directory = pki.root / "other-ca.d"
        directory.mkdir(exist_ok=True)
        (directory / "other-ca.pem").write_bytes(pki.other_ca.read_bytes())
        subprocess.run(["openssl", "rehash", str(directory)], check=True, capture_output=True)
        env["CHRONOS_KAFKA__SSL_CA_LOCATION"] = str(directory)
    elif case == "expired, CA as PEM text":
        env["CHRONOS_KAFKA__SSL_CA_PEM"] = Path(
            env.pop("CHRONOS_KAFKA__SSL_CA_LOCATION")
        ).read_text()
        env["CHRONOS_KAFKA_BOOTSTRAP_SERVERS"] = secured_kafka.address("EXPIRED")
    elif case == "another host's certificate":
        env["CHRONOS_KAFKA_BOOTSTRAP_SERVERS"] = secured_kafka.address("WRONGHOST")
    elif case == "expired certificate":
        env["CHRONOS_KAFKA_BOOTSTRAP_SERVERS"] = secured_kafka.address("EXPIRED")
    elif case == "wrong password":
        env["CHRONOS_KAFKA__SASL_PASSWORD"] = "not-" + NODE_USER[1]
    elif case == "unknown user":
        env["CHRONOS_KAFKA__SASL_USERNAME"] = "nobody"
    code, stderr = refused(env)
    assert code == 2, stderr[-3000:]
    assert setting in stderr, stderr[-3000:]
    assert error in stderr, stderr[-3000:]
    if error not in (SASL_REFUSED, CLIENT_CERTIFICATE_REFUSED):
        assert TLS_HANDSHAKE_FAILED in stderr, stderr[-3000:]
    assert NODE_USER[1] not in stderr, stderr[-3000:]


SCRAM_CASES = ("wrong password", "unknown user", "SCRAM, wrong CA")


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("wrong CA", DATABASE_TLS_FAILED),
        ("plaintext", DATABASE_TLS_REQUIRED),
    ],
)
def test_a_postgres_tls_setting_the_server_refuses_stops_start_up(
    case: str,
    error: str,
    migrated_tls_database: str,
    mutual_broker: TlsBroker,
    tls_topics: Topics,
    pki: Pki,
) -> None:
    env = tls_env(migrated_tls_database, mutual_broker, tls_topics)
    if case == "wrong CA":
        env["CHRONOS_DATABASE_URL"] = migrated_tls_database.replace(str(pki.ca), str(pki.other_ca))
    else:
        env["CHRONOS_DATABASE_URL"] = migrated_tls_database.replace(
            "sslmode=verify-full", "sslmode=disable"
        )
    code, stderr = refused(env)
    assert code == 2, stderr[-3000:]
    assert "CHRONOS_DATABASE_URL" in stderr, stderr[-3000:]
    assert error in stderr, stderr[-3000:]


@pytest.mark.parametrize(
    ("case", "setting", "error"),
    [
        # The broker sends its own certificate, not the CA's: none the client trusts signed it
        ("wrong CA", "CHRONOS_KAFKA__SSL_CA_LOCATION", CERTIFICATE_UNTRUSTED),
        (
            "missing client certificate",
            "CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION",
            CLIENT_CERTIFICATE_REFUSED,
        ),
        ("wrong password", SASL_SETTINGS, SASL_REFUSED),
        ("unknown user", "CHRONOS_KAFKA__SASL_USERNAME", SASL_REFUSED),
    ],
)
def test_chronos_check_names_what_tls_refuses(
    case: str,
    setting: str,
    error: str,
    migrated_tls_database: str,
    secured_kafka: SecuredBroker,
    tls_topics: Topics,
    pki: Pki,
) -> None:
    """The preflight's lines say "TLS" for Postgres and name the Kafka setting with Chronos's
    reason (a FAIL line: ``chronos check`` exits 1 when a check fails)."""
    scram = case in SCRAM_CASES
    env = tls_env(
        migrated_tls_database, secured_kafka.scram() if scram else secured_kafka.tls(), tls_topics
    )
    if case == "wrong CA":
        env["CHRONOS_KAFKA__SSL_CA_LOCATION"] = str(pki.other_ca)
    elif case == "missing client certificate":
        del env["CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION"]
        del env["CHRONOS_KAFKA__SSL_KEY_LOCATION"]
    elif case == "wrong password":
        env["CHRONOS_KAFKA__SASL_PASSWORD"] = "not-" + NODE_USER[1]
    else:
        env["CHRONOS_KAFKA__SASL_USERNAME"] = "nobody"
    started = time.monotonic()
    result = chronos("check", "--json", env=env, timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stdout + result.stderr[-2000:]
    assert elapsed < REFUSED_WITHIN_S, f"{elapsed:.1f} s"
    lines = {c["name"]: c for c in json.loads(result.stdout)}
    assert lines["postgres"]["status"] == "ok" and "(TLS)" in lines["postgres"]["detail"]
    kafka = lines["kafka"]
    assert kafka["status"] == "FAIL", kafka
    assert setting in kafka["detail"], kafka
    assert error in kafka["detail"], kafka


def test_a_node_runs_over_tls_without_client_certificates(
    secured_kafka: SecuredBroker,
    tls_database: str,
    run_node: Callable[..., NodeProcess],
) -> None:
    """Server-authenticated TLS only (most managed brokers with SASL): no client certificate
    configured, and none asked for (the broker's ``ONEWAY`` listener: its clients are the
    anonymous principal, a super user of the broker, as its own controller connection is)."""
    broker = secured_kafka.tls("ONEWAY", mutual=False)
    suffix = uuid.uuid4().hex[:8]
    topics = Topics(f"tls1-in-{suffix}", f"tls1-out-{suffix}", f"tls1-dlq-{suffix}")
    broker.create_topics({topics.input: 2, topics.output: 1, topics.dead_letter: 1})
    env = tls_env(tls_database, broker, topics)
    assert "CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION" not in env
    assert chronos("migrate", env=env, timeout=120).returncode == 0
    node = run_node(env=env)
    assert node.wait_for_event("node_started", 60), node.output()
    scheduled = chronos("schedule", "--in", "2", "--count", "3", "--value", "one-way", env=env)
    assert scheduled.returncode == 0, scheduled.stderr[-2000:]
    tailed = chronos("tail", "--from-beginning", "--max", "3", env=env, timeout=120)
    assert tailed.returncode == 0, tailed.stderr[-2000:]
    assert tailed.stdout.count("value=one-way") == 3, tailed.stdout
    assert node.proc.poll() is None, node.output()
