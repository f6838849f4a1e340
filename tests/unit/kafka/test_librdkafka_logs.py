"""librdkafka's own log lines reach Python logging (so the JSON log format covers them)."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from chronos.kafka import make_publisher
from tests.unit.helpers import settings


def test_librdkafka_lines_go_through_python_logging(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as probe:  # a port nobody listens on: the client logs its failures
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    publisher = make_publisher(settings(kafka_bootstrap_servers=f"127.0.0.1:{closed}"), "test")
    with caplog.at_level(logging.INFO, logger="chronos.librdkafka"):
        limit = time.monotonic() + 10
        while time.monotonic() < limit and not caplog.records:
            publisher.poll(0.1)
    records = [r for r in caplog.records if r.name == "chronos.librdkafka"]
    assert records, "no librdkafka log line reached the chronos.librdkafka logger"
    assert any("Connect to" in r.getMessage() or "FAIL" in r.getMessage() for r in records)
