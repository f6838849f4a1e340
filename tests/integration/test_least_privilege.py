"""A node needs only DML on its three tables: the schema belongs to the migration role
(CHRONOS_MIGRATION_DATABASE_URL), and a node with exactly the grants of docs/configuration.md
fires messages."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from confluent_kafka import Consumer, Producer
from psycopg import sql

from chronos import cli
from chronos.node.supervisor import Node
from chronos.protocol import DEADLINE_HEADER, MESSAGE_ID_HEADER, format_deadline
from chronos.store import PostgresStore
from tests.support import Topics, consumer_config, make_settings
from tests.support.databases import DatabaseFactory

pytestmark = pytest.mark.integration

# The grants docs/configuration.md documents for the nodes' role (run by the schema owner after
# `chronos migrate`); {role} and {database} are identifiers.
NODE_GRANTS = (
    "GRANT CONNECT ON DATABASE {database} TO {role}",
    "GRANT USAGE ON SCHEMA public TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON chronos_messages, chronos_nodes, chronos_cancels, "
    "chronos_tenants, chronos_pauses, chronos_limits TO {role}",
    "GRANT SELECT, INSERT, DELETE ON chronos_history TO {role}",
    "GRANT MAINTAIN ON chronos_messages TO {role}",  # Postgres 17 and later: the leader's vacuum
)


def as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


@pytest.fixture
def roles(database_factory: DatabaseFactory, postgres_server: str) -> Iterator[tuple[str, str]]:
    """(owner URL, node URL) of a fresh empty database; the node role may only log in."""
    owner_url = database_factory.create()
    role = f"chronos_node_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        yield owner_url, as_role(owner_url, role)
    finally:
        database_factory.drop(owner_url)
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_a_node_runs_with_only_the_documented_grants(
    roles: tuple[str, str],
    kafka_bootstrap: str,
    topics: Topics,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    owner_url, node_url = roles
    # `chronos migrate` with the node's URL as CHRONOS_DATABASE_URL (as the chart's pods get it)
    # and the owner's as CHRONOS_MIGRATION_DATABASE_URL: the migration uses the owner.
    monkeypatch.setenv("CHRONOS_DATABASE_URL", node_url)
    monkeypatch.setenv("CHRONOS_MIGRATION_DATABASE_URL", owner_url)
    assert cli.main(["migrate"]) == 0
    monkeypatch.delenv("CHRONOS_MIGRATION_DATABASE_URL")
    assert cli.main(["migrate"]) != 0  # the node's role cannot change the schema
    role = urlsplit(node_url).username or ""
    database = urlsplit(owner_url).path.lstrip("/")
    with psycopg.connect(owner_url, autocommit=True) as conn:
        for grant in NODE_GRANTS:
            conn.execute(
                sql.SQL(grant).format(role=sql.Identifier(role), database=sql.Identifier(database))
            )
    node = Node(make_settings(node_url, kafka_bootstrap, topics, poll_interval_ms=50))
    consumer = Consumer(consumer_config(kafka_bootstrap))
    consumer.subscribe([topics.output])
    try:
        with caplog.at_level(logging.WARNING):
            node.start()
            producer = Producer({"bootstrap.servers": kafka_bootstrap})
            deadline = datetime.now(UTC) + timedelta(seconds=8)  # stored, then claimed
            producer.produce(
                topics.input,
                value=b"least privilege",
                headers=[
                    (MESSAGE_ID_HEADER, b"lp-1"),
                    (DEADLINE_HEADER, format_deadline(deadline).encode()),
                ],
            )
            assert producer.flush(10) == 0
            fired = None
            limit = time.monotonic() + 40
            while fired is None and time.monotonic() < limit:
                record = consumer.poll(0.5)
                if record is not None and record.error() is None:
                    fired = record.value()
            assert fired == b"least privilege"
            time.sleep(1)  # heartbeat, backlog gauges and the detector ran meanwhile
    finally:
        consumer.close()
        node.request_stop()
        assert node.shutdown() == 0
    denied = [r.getMessage() for r in caplog.records if "permission denied" in r.getMessage()]
    assert denied == []


def test_the_nodes_role_may_vacuum_the_messages_table_only_with_its_grant(
    roles: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader vacuums the messages table (chronos.cluster.vacuum): a role with the DML
    grants alone may not (the store says so, and the vacuum leaves the table to autovacuum);
    with MAINTAIN it may, and does."""
    owner_url, node_url = roles
    monkeypatch.setenv("CHRONOS_DATABASE_URL", node_url)
    monkeypatch.setenv("CHRONOS_MIGRATION_DATABASE_URL", owner_url)
    assert cli.main(["migrate"]) == 0
    role = urlsplit(node_url).username or ""
    database = urlsplit(owner_url).path.lstrip("/")
    with psycopg.connect(owner_url, autocommit=True) as conn:
        for grant in NODE_GRANTS[:-1]:  # all but MAINTAIN
            conn.execute(
                sql.SQL(grant).format(role=sql.Identifier(role), database=sql.Identifier(database))
            )
    store = PostgresStore(node_url)
    try:
        assert store.dead_messages() == (0, False)
        with psycopg.connect(owner_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL(NODE_GRANTS[-1]).format(
                    role=sql.Identifier(role), database=sql.Identifier(database)
                )
            )
        assert store.dead_messages() == (0, True)
        store.vacuum_messages()
        with psycopg.connect(owner_url, autocommit=True) as conn:
            (vacuums,) = conn.execute(
                "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'chronos_messages'"
            ).fetchone() or (0,)
        assert vacuums == 1
    finally:
        store.close()
