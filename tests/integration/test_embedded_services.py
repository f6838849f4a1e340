"""The session's real services work as the rest of the suite assumes."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, Message, Producer
from confluent_kafka.admin import AdminClient

from chronos.embedded import EmbeddedKafka, EmbeddedPostgres, create_topics
from chronos.store import migrate
from tests.support import DatabaseFactory, Topics, consume, consumer_config

pytestmark = pytest.mark.integration


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
        ).fetchall()
    return {row[0] for row in rows}


def consume_from(consumer: Consumer, count: int, timeout: float = 30.0) -> list[Message]:
    records: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(records) < count and time.monotonic() < deadline:
        records += [m for m in consumer.consume(count - len(records), 0.5) if m.error() is None]
    return records


def _produce(bootstrap: str, topic: str, records: list[dict[str, object]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for record in records:
        producer.produce(topic, **record)  # type: ignore[arg-type]
    assert producer.flush(30) == 0


# ------------------------------------------------------------------------------- Postgres


def test_postgres_accepts_connections(postgres_server: str) -> None:
    with psycopg.connect(postgres_server) as conn:
        (version,) = conn.execute("SHOW server_version_num").fetchone() or (0,)
    assert int(str(version)) >= 130000  # DROP DATABASE ... WITH (FORCE)


def test_migrations_upgrade_and_downgrade(database_url: str) -> None:
    assert _tables(database_url) == set()
    migrate.upgrade(database_url)
    assert "chronos_messages" in _tables(database_url)
    migrate.downgrade(database_url)
    assert _tables(database_url) <= {"alembic_version"}


def test_each_test_gets_its_own_migrated_database(
    migrated_database_url: str, database_factory: DatabaseFactory
) -> None:
    assert "chronos_messages" in _tables(migrated_database_url)
    other = database_factory.create_migrated()
    try:
        assert other != migrated_database_url
        with psycopg.connect(other, autocommit=True) as conn:
            conn.execute("CREATE TABLE scratch (x int)")
        assert "scratch" not in _tables(migrated_database_url)
    finally:
        database_factory.drop(other)
    with psycopg.connect(migrated_database_url) as conn:
        row = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (other.rsplit("/", 1)[1],)
        ).fetchone()
    assert row is None


def test_postgres_restart_keeps_port_and_data(
    embedded_postgres: EmbeddedPostgres, database_url: str
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (x int)")
        conn.execute("INSERT INTO kept VALUES (42)")
    url, pid = embedded_postgres.url, embedded_postgres.pid

    assert embedded_postgres.restart() == url

    assert embedded_postgres.pid != pid
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT x FROM kept").fetchall() == [(42,)]


def test_postgres_stop_is_seen_by_clients(embedded_postgres: EmbeddedPostgres) -> None:
    embedded_postgres.stop()
    assert not embedded_postgres.running
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(embedded_postgres.url, connect_timeout=2)
    embedded_postgres.start()
    with psycopg.connect(embedded_postgres.url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


# ------------------------------------------------------------------------------- Kafka


def test_topics_fixture_creates_three_partitioned_topics(
    kafka_bootstrap: str, topics: Topics
) -> None:
    metadata = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10)
    for name in topics.names:
        assert len(metadata.topics[name].partitions) == topics.partitions == 3
    assert len(set(topics.names)) == 3


def test_create_topics_is_idempotent(kafka_bootstrap: str, topics: Topics) -> None:
    create_topics(kafka_bootstrap, {topics.input: 3, topics.output: 3})


def test_headers_round_trip_through_a_consumer_group(kafka_bootstrap: str, topics: Topics) -> None:
    headers = [
        ("chronosMessageId", b"3767d5c7-aced-45e5-91f1-3f7ad8205a3f"),
        ("trace", b"first"),
        ("trace", b"second"),
        ("empty", b""),
        ("absent", None),
    ]
    _produce(
        kafka_bootstrap,
        topics.input,
        [
            {"key": b"k1", "value": b'{"n": 1}', "headers": headers, "partition": 0},
            {"key": None, "value": None, "partition": 0},
        ],
    )

    first, second = consume(kafka_bootstrap, topics.input, 2)

    assert (first.key(), first.value()) == (b"k1", b'{"n": 1}')
    assert first.headers() == headers
    assert (second.key(), second.value(), second.headers()) == (None, None, None)


def test_consumer_group_resumes_from_committed_offsets(
    kafka_bootstrap: str, topics: Topics
) -> None:
    _produce(
        kafka_bootstrap, topics.output, [{"value": b"%d" % i, "partition": 0} for i in range(6)]
    )
    config = consumer_config(kafka_bootstrap)
    first = Consumer(config)
    try:
        first.subscribe([topics.output])
        seen = consume_from(first, 6)
        first.commit(asynchronous=False)
    finally:
        first.close()
    _produce(kafka_bootstrap, topics.output, [{"value": b"late", "partition": 0}])

    (late,) = consume(kafka_bootstrap, topics.output, 1, config=config)

    assert sorted(m.value() or b"" for m in seen) == [b"%d" % i for i in range(6)]
    assert late.value() == b"late"


def test_broker_restart_keeps_the_port_and_the_records(embedded_broker: EmbeddedKafka) -> None:
    bootstrap, pid = embedded_broker.bootstrap, embedded_broker.pid
    create_topics(bootstrap, {"chronos-restart-probe": 1})
    _produce(bootstrap, "chronos-restart-probe", [{"value": b"before restart"}])

    assert embedded_broker.restart() == bootstrap

    assert embedded_broker.pid != pid
    _produce(bootstrap, "chronos-restart-probe", [{"value": b"after restart"}])
    records = consume(bootstrap, "chronos-restart-probe", 2)
    assert [r.value() for r in records] == [b"before restart", b"after restart"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the system-user path is taken as root only")
def test_dev_data_dir_made_by_mktemp_works_as_root() -> None:
    """``chronos dev --data-dir "$(mktemp -d)"`` as root (containers, CI): the directory is
    0700, and the Postgres system user must still reach the cluster below it."""
    import shutil
    import tempfile

    workspace = Path(tempfile.mkdtemp(prefix="chronos-dev-"))  # as mktemp -d: 0700, root's
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o700
    server = EmbeddedPostgres(workspace / "postgres", durable=False, workspace=workspace)
    try:
        url = server.start()
        with psycopg.connect(url, connect_timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert workspace.stat().st_mode & stat.S_IXOTH  # searchable, ...
        assert not workspace.stat().st_mode & stat.S_IROTH  # ... not listable
    finally:
        server.stop()
        shutil.rmtree(workspace, ignore_errors=True)
