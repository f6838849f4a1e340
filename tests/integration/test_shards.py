"""Several databases, one per shard (docs/shards.md), with real Postgres databases and the real
broker: ``chronos migrate`` records in each which shard it is; a node writes each message to its
input partition's shard and fires every shard's; a node whose databases are given in another
order, or with another map, refuses to start; a database of a one-database deployment that holds
messages is not made one shard of several."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import cast

import psycopg
import pytest

from chronos import cli
from chronos.config.settings import Secret, load
from chronos.config.shards import ShardMap
from chronos.errors import ConfigError
from chronos.node.supervisor import Node
from chronos.preflight import check_postgres
from chronos.store import migrate
from tests.integration.nodes import (
    Nodes,
    assert_not_early,
    chronos_record,
    now,
    produce,
    read,
    tid_of,
)
from tests.support import Topics
from tests.support.databases import DatabaseFactory

pytestmark = pytest.mark.integration


@pytest.fixture
def two_databases(database_factory: DatabaseFactory) -> Iterator[list[str]]:
    """Two fresh databases at the head revision, not yet recorded as shards."""
    urls = [database_factory.create_migrated() for _ in range(2)]
    yield urls
    for url in urls:
        database_factory.drop(url)


def _recorded(url: str) -> tuple[int, int, str] | None:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT shard, shards, map FROM chronos_shard").fetchone()
    return None if row is None else (row[0], row[1], row[2])


def _fired_ids(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT id FROM chronos_history WHERE outcome = 'fired'").fetchall()
    return {r[0] for r in rows}


@pytest.fixture
def sharded(two_databases: list[str], kafka_bootstrap: str, topics: Topics) -> Iterator[Nodes]:
    """Nodes on both databases (shard 0 first); stopped after the test."""
    nodes = Nodes(" ".join(two_databases), kafka_bootstrap, topics)
    yield nodes
    nodes.stop_all()


def test_migrate_records_each_shard_and_a_node_fires_every_shards_messages(
    two_databases: list[str], sharded: Nodes, kafka_bootstrap: str, topics: Topics
) -> None:
    both = " ".join(two_databases)
    assert cli.main(["migrate", "--database-url", both]) == 0
    assert [_recorded(url) for url in two_databases] == [(0, 2, "mod"), (1, 2, "mod")]
    assert cli.main(["migrate", "--database-url", both]) == 0  # a re-run: the same records

    sharded.start()
    due = now() + timedelta(seconds=2)
    sent = [chronos_record(f"m{i}", due, key=b"k%d" % i) for i in range(30)]
    produce(kafka_bootstrap, topics.input, sent)
    records = read(kafka_bootstrap, topics.output, topics.partitions, len(sent))
    fired = Counter(tid_of(r) for r in records)
    assert fired == Counter(s.test_id for s in sent)  # each once
    advance = sharded.settings().timing_advance_ms
    assert_not_early(records, {s.test_id: s for s in sent}, advance)

    # Each message lived in its input partition's shard: partition p in shard p mod 2.
    shard_of = ShardMap(2).shard_of
    expected: list[set[str]] = [set(), set()]
    for record in read(kafka_bootstrap, topics.input, topics.partitions, len(sent), settle=0):
        expected[shard_of(cast(int, record.partition()))].add(tid_of(record))
    assert all(expected)  # both shards had messages (3 partitions, 30 keys)
    assert [_fired_ids(url) for url in two_databases] == expected


def test_a_node_given_the_databases_in_another_order_or_map_refuses_to_start(
    two_databases: list[str], kafka_bootstrap: str, topics: Topics
) -> None:
    assert cli.main(["migrate", "--database-url", " ".join(two_databases)]) == 0
    for url, shard_map in (
        (" ".join(reversed(two_databases)), "mod"),
        (" ".join(two_databases), "0-1:0,2:1"),
    ):
        node = Node(Nodes(url, kafka_bootstrap, topics).settings(shard_map=shard_map))
        with pytest.raises(ConfigError, match="is recorded as shard") as refused:
            node.start()
        node.shutdown()
        assert "CHRONOS_SHARD_MAP" in str(refused.value)
    # `chronos migrate` with the databases swapped refuses too (exit 2), and changes nothing.
    assert cli.main(["migrate", "--database-url", " ".join(reversed(two_databases))]) == 2
    assert [_recorded(url) for url in two_databases] == [(0, 2, "mod"), (1, 2, "mod")]


def test_a_database_holding_a_one_database_deployments_messages_is_not_made_a_shard(
    two_databases: list[str],
) -> None:
    with psycopg.connect(two_databases[0], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO chronos_messages (id, deadline, message_value) "
            "VALUES ('waiting', now() + interval '1 hour', '\\x00')"
        )
    with pytest.raises(ConfigError, match="holds the messages of a deployment on one database"):
        migrate.record_shard(two_databases[0], 0, ShardMap(2))
    assert _recorded(two_databases[0]) is None
    # As one database it is today's deployment: nothing recorded; drained, it can become a shard.
    assert migrate.record_shard(two_databases[0], 0, ShardMap(1)) is False
    assert _recorded(two_databases[0]) is None
    with psycopg.connect(two_databases[0], autocommit=True) as conn:
        conn.execute("DELETE FROM chronos_messages")
    assert migrate.record_shard(two_databases[0], 0, ShardMap(2)) is True
    assert _recorded(two_databases[0]) == (0, 2, "mod")


def test_check_names_each_shard_and_fails_one_recorded_as_another(
    two_databases: list[str],
) -> None:
    assert cli.main(["migrate", "--database-url", " ".join(two_databases)]) == 0
    checks = check_postgres(load(environ={}, database_url=Secret(" ".join(two_databases))))
    assert [(c.name, c.status) for c in checks if c.name.startswith("shard")] == [
        ("shard (shard 0)", "ok"),
        ("shard (shard 1)", "ok"),
    ]
    assert all(c.ok for c in checks), checks
    swapped = check_postgres(
        load(environ={}, database_url=Secret(" ".join(reversed(two_databases))))
    )
    failed = [c for c in swapped if c.status == "FAIL"]
    assert [c.name for c in failed] == ["shard (shard 0)", "shard (shard 1)"]
    assert "is recorded as shard 1 of 2" in failed[0].detail
