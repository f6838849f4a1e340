"""Schema revision 0019 (moving an input partition to another shard): the messages of the
previous release keep no partition and its enqueue still writes beside the new column; the
fence's function says what a shard refuses; a re-run (its steps done, the revision not recorded)
goes through; the downgrade removes what it added."""

from __future__ import annotations

import psycopg
import pytest

from chronos.store import migrate

pytestmark = pytest.mark.integration

PREVIOUS_INSERT = (  # the previous release's schedule, without the column it never wrote
    "INSERT INTO chronos_messages (id, deadline, message_key, message_value, message_headers, "
    "target_topic, tenant, recurrence, expires_ms) "
    "VALUES (%s, now() + interval '1 hour', 'k', 'v', NULL, NULL, '', NULL, NULL)"
)


def _refused(conn: psycopg.Connection[tuple[object, ...]]) -> list[int]:
    row = conn.execute("SELECT chronos_partitions_refused()").fetchone()
    assert row is not None
    return [int(p) for p in row[0]]  # type: ignore[attr-defined]


def test_migration_0019_adds_the_moves_beside_the_previous_release_and_runs_again(
    database_url: str,
) -> None:
    migrate.upgrade(database_url, "0018")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(PREVIOUS_INSERT, ("before",))
    migrate.upgrade(database_url, "0019")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(PREVIOUS_INSERT, ("after",))
        rows = conn.execute(
            "SELECT id, input_partition FROM chronos_messages ORDER BY id"
        ).fetchall()
        assert rows == [("after", None), ("before", None)]
        conn.execute("INSERT INTO chronos_shard (id, shard, shards, map) VALUES (1, 1, 2, 'mod')")
        assert _refused(conn) == []
        conn.execute(
            "INSERT INTO chronos_partition_moves (partition, shard, state, generation) VALUES "
            "(3, 0, 'moved', 2), (5, 1, 'moved', 2), (7, 1, 'moving', 3)"
        )
        assert _refused(conn) == [3, 7]  # moved away, and moving (even here)
        # An interruption after its steps, before the revision was recorded: a re-run.
        conn.execute("UPDATE alembic_version SET version_num = '0018'")
    migrate.upgrade(database_url, "0019")
    with psycopg.connect(database_url, autocommit=True) as conn:
        assert _refused(conn) == [3, 7]
    migrate.downgrade(database_url, "0018")
    with psycopg.connect(database_url, autocommit=True) as conn:
        gone = conn.execute(
            "SELECT to_regclass('chronos_partition_moves'), "
            "to_regprocedure('chronos_partitions_refused()'), "
            "(SELECT count(*) FROM information_schema.columns "
            " WHERE table_name = 'chronos_messages' AND column_name = 'input_partition')"
        ).fetchone()
        assert gone == (None, None, 0)
        conn.execute(PREVIOUS_INSERT, ("downgraded",))
