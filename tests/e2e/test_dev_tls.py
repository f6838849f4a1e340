"""``chronos dev --tls`` as a user runs it: the embedded Apache Kafka on its own TLS listener
(client certificates required, no plaintext listener) and Debian's Postgres with TLS only, and
a node and the CLI configured with the settings it prints."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from chronos.embedded.process import free_port
from chronos.store.postgres.session import DATABASE_TLS_REQUIRED, connection_refusal
from tests.e2e.test_cli_e2e import NodeProcess, chronos
from tests.support.polling import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def test_chronos_dev_tls_serves_nodes_and_the_cli_over_tls_only(
    run_node: Callable[..., NodeProcess],
) -> None:
    """``chronos dev --nodes 0 --tls``: its Postgres and broker (on the broker's own TLS
    listener) accept TLS only; a ``chronos run`` node, ``schedule`` and ``tail`` configured with
    the settings it prints fire through them, and a client without those settings reaches
    neither."""
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
        with pytest.raises(psycopg.OperationalError) as plaintext:
            psycopg.connect(
                url.replace("sslmode=verify-full", "sslmode=disable"), connect_timeout=5
            )
        assert connection_refusal(plaintext.value) == DATABASE_TLS_REQUIRED, plaintext.value
        plain = AdminClient({"bootstrap.servers": f"127.0.0.1:{kafka_port}"})
        with pytest.raises(KafkaException):
            plain.list_topics(timeout=3)
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
