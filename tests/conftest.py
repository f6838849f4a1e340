"""Session fixtures giving every test tier real services, started by Chronos's own code.

Services start lazily: a test run that needs neither Postgres nor Kafka starts nothing.
See ``tests/support/services.py`` for how each service is chosen.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from chronos.embedded import EmbeddedKafka, EmbeddedPostgres
from chronos.embedded.tls import Pki
from tests.support import services
from tests.support.databases import DatabaseFactory
from tests.support.kafka import TEST_PARTITIONS, Topics, delete_topics, new_topics
from tests.support.machine import machine_share
from tests.support.scheduling import make_scheduler
from tests.support.tls import SecuredBroker, pki_or_skip, secured_broker
from tests.support.worker_time import WorkerTime

# ------------------------------------------------------------------------------- workers


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(WorkerTime(), "chronos-worker-time")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The fault scenarios one after another on one worker (``tests/support/scheduling.py``)."""
    return make_scheduler(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Every test's setup, call and teardown hold the machine lock; an ``exclusive`` test holds
    it alone (``tests/support/machine.py``)."""
    with machine_share(item):
        yield


# ------------------------------------------------------------------------------- logging


@pytest.fixture(autouse=True)
def _restore_root_logging() -> Iterator[None]:
    """``chronos.observability.logs.configure`` (the CLI calls it) points the root logger at the
    sys.stderr of
    the moment, which pytest closes after the test; records emitted later (a node thread, a
    library's background thread) would land as "--- Logging error ---" in another test's
    output. Every test leaves the root logger as it found it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture(autouse=True)
def _forget_write_failures() -> Iterator[None]:
    """A test whose publisher failed leaves ``KAFKA_WRITES`` down (one whose store refused the
    pauses ``FLOW_CONTROL``), which readiness reports: every test starts without that state."""
    from chronos.observability.dependencies import FLOW_CONTROL, KAFKA_WRITES

    KAFKA_WRITES.reset()
    FLOW_CONTROL.reset()
    yield


# ------------------------------------------------------------------------------- Postgres


@pytest.fixture(scope="session")
def postgres_service() -> Iterator[services.PostgresService]:
    with services.postgres_service() as service:
        yield service


@pytest.fixture(scope="session")
def postgres_server(postgres_service: services.PostgresService) -> str:
    """URL of the session's Postgres server (its maintenance database)."""
    return postgres_service.url


@pytest.fixture
def embedded_postgres(postgres_service: services.PostgresService) -> Iterator[EmbeddedPostgres]:
    """The embedded server itself, for tests that stop or restart it.

    Skips when an external server or a container is in use. Restarted after the test if the
    test left it stopped, so later tests still find it.
    """
    server = postgres_service.embedded
    if server is None:
        services.unavailable("needs the embedded Postgres (an external server is in use)")
    yield server
    if not server.running:
        server.start()


@pytest.fixture(scope="session")
def database_factory(postgres_server: str) -> Iterator[DatabaseFactory]:
    factory = DatabaseFactory(postgres_server)
    yield factory
    factory.close()


@pytest.fixture
def database_url(database_factory: DatabaseFactory) -> Iterator[str]:
    """A fresh, empty database for this test; dropped afterwards."""
    url = database_factory.create()
    yield url
    database_factory.drop(url)


@pytest.fixture
def migrated_database_url(database_factory: DatabaseFactory) -> Iterator[str]:
    """A fresh database at the head revision (a copy of a template migrated once)."""
    url = database_factory.create_migrated()
    yield url
    database_factory.drop(url)


# ------------------------------------------------------------------------------- Kafka


@pytest.fixture(scope="session")
def kafka_service() -> Iterator[services.KafkaService]:
    with services.kafka_service() as service:
        yield service


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_service: services.KafkaService) -> str:
    """Bootstrap address of the session's Kafka broker."""
    return kafka_service.bootstrap


@pytest.fixture
def embedded_broker(kafka_service: services.KafkaService) -> Iterator[EmbeddedKafka]:
    """The embedded broker itself, for tests that stop or restart it (a restart keeps its
    topics and records). Skips when an external broker is in use; restarted after the test if
    the test left it stopped (or frozen: SIGCONT)."""
    broker = kafka_service.embedded
    if broker is None:
        services.unavailable("needs the embedded broker (an external broker is in use)")
    yield broker
    broker.signal(signal.SIGCONT)
    if not broker.running:
        broker.start()


@pytest.fixture
def make_topics(
    kafka_bootstrap: str, request: pytest.FixtureRequest
) -> Iterator[Callable[..., Topics]]:
    """``make_topics(partitions=3)`` creates another unique input/output/dead-letter trio."""
    created: list[Topics] = []

    def make(partitions: int = TEST_PARTITIONS) -> Topics:
        topics = new_topics(kafka_bootstrap, request.node.name, partitions)
        created.append(topics)
        return topics

    yield make
    for topics in created:
        delete_topics(kafka_bootstrap, topics)


@pytest.fixture
def topics(make_topics: Callable[..., Topics]) -> Topics:
    """Unique input/output/dead-letter topics (3 partitions each) for this test."""
    return make_topics()


# ------------------------------------------------------------------------------- security


@pytest.fixture(scope="session")
def tls_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The suite's certificates (a CA, server and client certificates, a second CA...)."""
    return pki_or_skip(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def secured_kafka(
    tls_pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SecuredBroker]:
    """One Apache Kafka with its own TLS and SASL_SSL (SCRAM-SHA-512) listeners and ACLs on,
    shared by the session's security tests (started only when one asks for it)."""
    with secured_broker(tls_pki, tmp_path_factory.mktemp("secured-kafka")) as broker:
        yield broker
