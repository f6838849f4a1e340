"""librdkafka's own log lines reach Python logging (so the JSON log format covers them)."""

from __future__ import annotations

import logging
import socket
import time

import pytest
from prometheus_client import REGISTRY

from chronos.kafka import make_publisher
from chronos.kafka.config import LIBRDKAFKA_LOG
from chronos.observability.logs import ThrottleFilter
from tests.unit.helpers import settings


@pytest.fixture(autouse=True)
def fresh_throttle() -> None:
    """The logger's throttle lets one line of a kind through a minute, for the whole process: a
    test that ran before this one on the same worker (in any order) must not have used it up."""
    for throttle in LIBRDKAFKA_LOG.filters:
        if isinstance(throttle, ThrottleFilter):
            throttle.kinds.clear()


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


def test_a_reset_of_an_offset_out_of_range_is_counted_each_time() -> None:
    def count() -> float:
        return REGISTRY.get_sample_value("chronos_intake_offsets_out_of_range_total") or 0.0

    reset = (
        "%s [%s] %s",
        "OFFSET",
        "chronos-1-intake#consumer-1",
        "[thrd:main]: in [0]: offset reset (at offset 2 (leader epoch -1), broker 1) to offset "
        "BEGINNING (leader epoch -1): fetch failed due to requested offset not available on the "
        "broker: Broker: Offset out of range",
    )
    before = count()
    for _ in range(2):  # the second within the throttle's minute: not logged, still counted
        LIBRDKAFKA_LOG.warning(*reset)
    LIBRDKAFKA_LOG.warning("%s [%s] %s", "FAIL", "c", "Connect to 127.0.0.1:1 failed")
    assert count() - before == 2
