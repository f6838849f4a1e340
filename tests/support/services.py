"""Real Postgres and Kafka for the test session, in order of preference:

1. an external service named by ``CHRONOS_TEST_DATABASE_URL`` / ``CHRONOS_TEST_KAFKA_BOOTSTRAP``;
2. a container, when ``CHRONOS_TEST_DOCKER=1`` (needs a Docker engine);
3. the embedded servers of ``chronos.embedded`` (no Docker needed): the default. Kafka is
   Apache Kafka (one node, broker and controller, shared by the whole session; tests isolate
   themselves by unique topic and group names). It runs with ``auto.create.topics.enable=false``
   as production usually does, so every test creates the topics it uses (``make_topics``).

When none can start, tests that need the service skip locally and fail in CI (``CI=true``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from chronos.embedded import EmbeddedKafka, EmbeddedPostgres


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def unavailable(reason: str) -> NoReturn:
    """Fail loudly in CI; skip with the reason on a developer machine."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: real services are required)", pytrace=False)
    pytest.skip(reason)


def _use_docker() -> bool:
    return os.environ.get("CHRONOS_TEST_DOCKER", "") == "1"


@dataclass(frozen=True)
class PostgresService:
    url: str
    """A server URL; tests get their own databases on it (see ``DatabaseFactory``)."""
    embedded: EmbeddedPostgres | None = None


@dataclass(frozen=True)
class KafkaService:
    bootstrap: str
    embedded: EmbeddedKafka | None = None


@contextmanager
def postgres_service() -> Iterator[PostgresService]:
    external = os.environ.get("CHRONOS_TEST_DATABASE_URL")
    if external:
        yield PostgresService(external)
    elif _use_docker():
        yield from _postgres_container()
    else:
        yield from _embedded_postgres()


@contextmanager
def kafka_service() -> Iterator[KafkaService]:
    external = os.environ.get("CHRONOS_TEST_KAFKA_BOOTSTRAP")
    if external:
        yield KafkaService(external)
    elif _use_docker():
        yield from _kafka_container()
    else:
        yield from _embedded_broker()


def _embedded_postgres() -> Iterator[PostgresService]:
    data_dir = Path(tempfile.mkdtemp(prefix="chronos-test-pg-"))
    server = EmbeddedPostgres(data_dir, durable=False)
    try:
        try:
            server.start()
        except Exception as exc:  # noqa: BLE001 - any reason means "no Postgres here"
            unavailable(f"cannot start the embedded Postgres: {exc}")
        yield PostgresService(server.url, server)
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def _embedded_broker() -> Iterator[KafkaService]:
    data_dir = Path(tempfile.mkdtemp(prefix="chronos-test-kafka-"))
    broker = EmbeddedKafka(log_dir=data_dir)
    try:
        try:
            broker.start()
        except Exception as exc:  # noqa: BLE001 - any reason means "no Kafka here"
            unavailable(f"cannot start the embedded Apache Kafka: {exc}")
        yield KafkaService(broker.bootstrap, broker)
    finally:
        broker.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


def _postgres_container() -> Iterator[PostgresService]:
    try:
        try:
            from testcontainers.community.postgres import PostgresContainer
        except ImportError:
            from testcontainers.postgres import PostgresContainer

        container = PostgresContainer("postgres:17-alpine", driver=None).start()
    except Exception as exc:  # noqa: BLE001
        unavailable(f"CHRONOS_TEST_DOCKER=1 but the Postgres container did not start: {exc}")
    try:
        yield PostgresService(container.get_connection_url())
    finally:
        container.stop()


def _kafka_container() -> Iterator[KafkaService]:
    try:
        try:
            from testcontainers.community.kafka import KafkaContainer
        except ImportError:
            from testcontainers.kafka import KafkaContainer

        container = KafkaContainer().start()
    except Exception as exc:  # noqa: BLE001
        unavailable(f"CHRONOS_TEST_DOCKER=1 but the Kafka container did not start: {exc}")
    try:
        yield KafkaService(container.get_bootstrap_server())
    finally:
        container.stop()
