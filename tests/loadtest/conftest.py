"""Fixtures for the load-test tests: one SparkSession, a fresh embedded Kafka per module, and a
canned ``bench.json`` for the benchmark's verdicts and report."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chronos.embedded import EmbeddedKafka
from tests.loadtest import canned
from tests.support import services

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


class _Py4jChatter(logging.Filter):
    """py4j logs a reconnect of its gateway at INFO, some of it through the root logger
    (``logging.info``): records of this worker's session that a later test in the same process
    would read as its own output once a Chronos command has configured the root logger."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or "py4j" not in record.pathname


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from loadtest.analysis.sparkutil import spark_session

    # Quiet from the start: the session lives as long as the test process (one per worker),
    # beside every test that runs after it there. py4j also logs at INFO while the interpreter
    # shuts down, after pytest closed its streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    chatter = _Py4jChatter()
    logging.getLogger().addFilter(chatter)
    session = spark_session("local[2]", driver_memory="1g", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def lt_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh Apache Kafka for this module (the embedded one, started like
    ``tests/conftest.py`` starts the session's): the load-test runs use fixed topic names and
    read them from the start, so they must not see another module's records. Yields the
    bootstrap address."""
    broker = EmbeddedKafka(log_dir=tmp_path_factory.mktemp("broker"))
    try:
        bootstrap = broker.start()
    except Exception as exc:  # noqa: BLE001 - any reason means "no broker here"
        services.unavailable(f"cannot start the embedded Apache Kafka: {exc}")
    try:
        yield bootstrap
    finally:
        broker.stop()


@pytest.fixture
def canned_bench() -> dict[str, Any]:
    """A ``bench.json`` in which every scenario meets its targets, fresh for each test: change
    it freely."""
    return canned.passing_bench()
