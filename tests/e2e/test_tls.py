"""Chronos over encrypted connections only, every client a real process: the broker behind a TLS
terminator that requires a client certificate (it advertises the terminator's port, so a
client without the TLS settings reaches nothing), and Postgres accepting TLS connections only
(``hostssl`` rules alone), verified with ``sslmode=verify-full``.

``chronos migrate``, ``chronos check``, two ``chronos run`` nodes, ``chronos schedule``,
``chronos import``, ``chronos tail`` and ``chronos admin`` run through them; a wrong CA, a
certificate for another host, an expired certificate and a missing client certificate stop
start-up with exit 2 naming the setting.
"""

from __future__ import annotations

import json
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from chronos.embedded.tls import Pki
from tests.e2e.test_cli_e2e import NodeProcess, chronos
from tests.support import Topics
from tests.support.polling import eventually
from tests.support.tls import (
    TlsBroker,
    pki_or_skip,
    terminator,
    tls_broker,
    tls_postgres,
    verify_full_url,
)

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

TOKEN = "tls-admin-token"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return pki_or_skip(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def mutual_broker(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    with tls_broker(pki, tmp_path_factory.mktemp("mtls-broker"), mutual=True) as broker:
        yield broker


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
        "CHRONOS_CONSUMER__SESSION_TIMEOUT_MS": "6000",
        "CHRONOS_HTTP_PORT": "0",
        "CHRONOS_LOG_FORMAT": "json",
        "CHRONOS_POLL_INTERVAL_MS": "50",
        "CHRONOS_HOLD_TIME_MS": "6000",
        "CHRONOS_SHUTDOWN_TIMEOUT_MS": "8000",
        "CHRONOS_ADMIN_TOKEN": TOKEN,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------ nothing falls back


def test_the_broker_and_postgres_refuse_plaintext(
    mutual_broker: TlsBroker, tls_server: str, pki: Pki
) -> None:
    """The proof that the other tests carry their bytes over TLS: without the settings, a
    client reaches neither server (no silent fallback to plaintext)."""
    plain_settings: dict[str, str | int | float | bool] = {
        "bootstrap.servers": mutual_broker.bootstrap,
        "socket.connection.setup.timeout.ms": 3000,
    }
    plain = AdminClient(plain_settings)
    with pytest.raises(KafkaException):
        plain.list_topics(timeout=5)
    no_client_cert = {
        k: v for k, v in mutual_broker.client_settings().items() if "certificate" not in k
    }
    no_client_cert = {k: v for k, v in no_client_cert.items() if k != "ssl.key.location"}
    with pytest.raises(KafkaException):
        AdminClient(no_client_cert).list_topics(timeout=5)
    assert AdminClient(mutual_broker.client_settings()).list_topics(timeout=10).brokers
    url = verify_full_url(tls_server, pki)
    with pytest.raises(psycopg.OperationalError, match=r"no pg_hba\.conf entry"):
        psycopg.connect(url.replace("sslmode=verify-full", "sslmode=disable"), connect_timeout=5)
    with psycopg.connect(url, connect_timeout=5) as conn:
        row = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
    assert row == (True,)


# ------------------------------------------------------------------ the whole system


def test_nodes_and_the_cli_run_over_mutual_tls_and_verify_full(
    tls_database: str,
    mutual_broker: TlsBroker,
    tls_topics: Topics,
    tmp_path: Path,
    run_node: Callable[..., NodeProcess],
) -> None:
    env = tls_env(tls_database, mutual_broker, tls_topics)
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


def refused(env: dict[str, str]) -> tuple[int, str]:
    result = chronos("run", env=env, timeout=120)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result.returncode, result.stderr


@pytest.mark.parametrize(
    ("case", "setting", "error"),
    [
        ("wrong CA", "CHRONOS_KAFKA__SSL_CA_LOCATION", "certificate verify failed"),
        (
            "missing client certificate",
            "CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION",
            "alert certificate required",
        ),
        (
            "another host's certificate",
            "CHRONOS_KAFKA__SSL_CA_LOCATION",
            "mismatch, certificate is not valid",
        ),
        ("expired certificate", "CHRONOS_KAFKA__SSL_CA_LOCATION", "certificate has expired"),
        # Every CA setting librdkafka takes: the system store, a directory, PEM text.
        ("system CA store", "CHRONOS_KAFKA__SSL_CA_LOCATION", "certificate verify failed"),
        ("CA directory", "CHRONOS_KAFKA__SSL_CA_LOCATION", "certificate verify failed"),
        ("expired, CA as PEM text", "CHRONOS_KAFKA__SSL_CA_PEM", "certificate has expired"),
    ],
)
def test_a_kafka_tls_setting_the_broker_refuses_stops_start_up(
    case: str,
    setting: str,
    error: str,
    migrated_tls_database: str,
    mutual_broker: TlsBroker,
    tls_topics: Topics,
    pki: Pki,
) -> None:
    """Fast (no retry loop), exit 2, the setting and the TLS error named, no secret printed."""
    env = tls_env(migrated_tls_database, mutual_broker, tls_topics)
    if case == "wrong CA":
        env["CHRONOS_KAFKA__SSL_CA_LOCATION"] = str(pki.other_ca)
        code, stderr = refused(env)
    elif case == "missing client certificate":
        del env["CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION"]
        del env["CHRONOS_KAFKA__SSL_KEY_LOCATION"]
        code, stderr = refused(env)
    elif case == "system CA store":
        env["CHRONOS_KAFKA__SSL_CA_LOCATION"] = "probe"  # the test CA is not in it
        code, stderr = refused(env)
    elif case == "CA directory":
        directory = pki.root / "other-ca.d"
        directory.mkdir(exist_ok=True)
        (directory / "other-ca.pem").write_bytes(pki.other_ca.read_bytes())
        subprocess.run(["openssl", "rehash", str(directory)], check=True, capture_output=True)
        env["CHRONOS_KAFKA__SSL_CA_LOCATION"] = str(directory)
        code, stderr = refused(env)
    elif case == "expired, CA as PEM text":
        env["CHRONOS_KAFKA__SSL_CA_PEM"] = Path(
            env.pop("CHRONOS_KAFKA__SSL_CA_LOCATION")
        ).read_text()
        with terminator(mutual_broker, "expired") as bootstrap:
            env["CHRONOS_KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
            code, stderr = refused(env)
    else:
        name = "wrong-host" if case == "another host's certificate" else "expired"
        with terminator(mutual_broker, name) as bootstrap:
            env["CHRONOS_KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
            code, stderr = refused(env)
    assert code == 2, stderr[-3000:]
    assert setting in stderr, stderr[-3000:]
    assert error.lower() in stderr.lower(), stderr[-3000:]


@pytest.mark.parametrize(
    ("case", "error"),
    [
        ("wrong CA", "certificate verify failed"),
        ("plaintext", "no pg_hba.conf entry"),
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


def test_chronos_check_names_what_tls_refuses(
    migrated_tls_database: str, mutual_broker: TlsBroker, tls_topics: Topics, pki: Pki
) -> None:
    """The preflight's lines say "TLS" for Postgres and name the Kafka setting with OpenSSL's
    reason when the broker's certificate does not verify."""
    env = tls_env(migrated_tls_database, mutual_broker, tls_topics)
    env["CHRONOS_KAFKA__SSL_CA_LOCATION"] = str(pki.other_ca)
    result = chronos("check", "--json", env=env, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr[-2000:]
    lines = {c["name"]: c for c in json.loads(result.stdout)}
    assert lines["postgres"]["status"] == "ok" and "(TLS)" in lines["postgres"]["detail"]
    kafka = lines["kafka"]
    assert kafka["status"] == "FAIL", kafka
    assert "CHRONOS_KAFKA__SSL_CA_LOCATION" in kafka["detail"], kafka
    assert "self-signed certificate in certificate chain" in kafka["detail"], kafka


def test_a_node_runs_over_tls_without_client_certificates(
    pki: Pki,
    tls_database: str,
    tmp_path_factory: pytest.TempPathFactory,
    run_node: Callable[..., NodeProcess],
) -> None:
    """Server-authenticated TLS only (most managed brokers with SASL): no client certificate
    configured, and none asked for."""
    with tls_broker(pki, tmp_path_factory.mktemp("tls-broker"), mutual=False) as broker:
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


# ------------------------------------------------------------------ chronos dev --tls


def test_chronos_dev_tls_serves_nodes_and_the_cli_over_tls_only(
    run_node: Callable[..., NodeProcess],
) -> None:
    """``chronos dev --nodes 0 --tls``: its Postgres and broker accept TLS only; a ``chronos run``
    node, ``schedule`` and ``tail`` configured with the settings it prints fire through them,
    and a client without those settings reaches neither."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile
    import threading

    from chronos.embedded.process import free_port

    # As a user runs it: a data directory of its own (pytest's are below a 0700 directory the
    # Postgres system user cannot pass when we are root).
    data_dir = Path(tempfile.mkdtemp(prefix="chronos-dev-tls-"))

    kafka_port, pg_port = free_port(), free_port()
    dev = subprocess.Popen(
        [
            sys.executable, "-m", "chronos", "dev", "--nodes", "0", "--tls",
            "--data-dir", str(data_dir),
            "--kafka-port", str(kafka_port), "--pg-port", str(pg_port),
        ],
        env={k: v for k, v in os.environ.items() if not k.startswith("CHRONOS_")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    lines: list[str] = []
    assert dev.stdout is not None
    pump = threading.Thread(target=lambda: lines.extend(dev.stdout or []), daemon=True)
    pump.start()
    try:
        assert eventually(
            lambda: any("chronos dev: ready" in line for line in lines), timeout=120
        ), lines
        url = next(line.split()[-1] for line in lines if "database URL" in line)
        assert "sslmode=verify-full" in url, lines
        env = {
            "CHRONOS_DATABASE_URL": url,
            "CHRONOS_KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{kafka_port}",
            "CHRONOS_CONSUMER__SESSION_TIMEOUT_MS": "6000",
            "CHRONOS_HTTP_PORT": "0",
            "CHRONOS_LOG_FORMAT": "json",
        }
        for line in lines:
            if "TLS setting" in line:
                name, value = line.split()[-1].split("=", 1)
                env[name] = value
        assert env.get("CHRONOS_KAFKA__SECURITY_PROTOCOL") == "SSL", lines
        assert "CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION" in env, lines
        with pytest.raises(psycopg.OperationalError, match=r"no pg_hba\.conf entry"):
            psycopg.connect(
                url.replace("sslmode=verify-full", "sslmode=disable"), connect_timeout=5
            )
        node = run_node(env=env)
        assert node.wait_for_event("node_started", 60), node.output()
        scheduled = chronos("schedule", "--in", "2", "--count", "3", "--value", "via-dev", env=env)
        assert scheduled.returncode == 0, scheduled.stderr[-2000:]
        tailed = chronos("tail", "--from-beginning", "--max", "3", env=env, timeout=120)
        assert tailed.stdout.count("value=via-dev") == 3, tailed.stdout + tailed.stderr[-2000:]
    finally:
        dev.send_signal(signal.SIGTERM)
        try:
            dev.wait(60)
        except subprocess.TimeoutExpired:
            dev.kill()
            dev.wait()
        shutil.rmtree(data_dir, ignore_errors=True)
