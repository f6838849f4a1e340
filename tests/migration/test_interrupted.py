"""An interrupted ``chronos migrate`` can be run again and finishes. A migration that builds an
index CONCURRENTLY commits its other steps first (the build cannot run in a transaction), so an
interruption during the build leaves those steps done, the revision not recorded, and the index
INVALID (present, maintained, never used): the next run must redo nothing twice and rebuild it."""

from __future__ import annotations

import psycopg
import pytest

from chronos.store import migrate

pytestmark = pytest.mark.integration


def index_state(url: str, name: str) -> tuple[bool, str] | None:
    """(valid, definition) of index ``name``, None if absent."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = %s",
            (name,),
        ).fetchone()
    return None if row is None else (bool(row[0]), str(row[1]))


def leave_invalid_index(url: str, name: str, column: str) -> None:
    """What a CREATE INDEX CONCURRENTLY cut short leaves behind: an INVALID index of that name
    (here a unique build that fails on duplicate values)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO chronos_messages (id, deadline, message_value) VALUES "
            "('dup-1', now() + interval '1 hour', '\\x00'::bytea), "
            "('dup-2', now() + interval '1 hour', '\\x00'::bytea)"
        )
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                f"CREATE UNIQUE INDEX CONCURRENTLY {name} ON chronos_messages ((1), {column})"
            )
        conn.execute("DELETE FROM chronos_messages WHERE id LIKE 'dup-%'")
    state = index_state(url, name)
    assert state is not None and state[0] is False, state


@pytest.mark.parametrize(
    ("revision", "previous", "index"),
    [
        ("0002", "0001", "chronos_messages_failed_idx"),
        ("0003", "0002", "chronos_messages_claimed_by_idx"),
        ("0004", "0003", "chronos_messages_ready_idx"),
        ("0006", "0005", "chronos_messages_tenant_ready_idx"),
        ("0008", "0007", "chronos_messages_topic_ready_idx"),
        ("0008", "0007", "chronos_messages_id_ready_idx"),
        ("0008", "0007", "chronos_messages_key_ready_idx"),
        ("0008", "0007", "chronos_messages_recurring_ready_idx"),
    ],
)
def test_a_migration_interrupted_in_its_index_build_runs_again_and_finishes(
    database_url: str, revision: str, previous: str, index: str
) -> None:
    migrate.upgrade(database_url, revision)
    built = index_state(database_url, index)
    assert built is not None and built[0]
    # The state an interruption during the build leaves: every step before it committed, the
    # revision not recorded, the index INVALID.
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"DROP INDEX {index}")
        conn.execute("UPDATE alembic_version SET version_num = %s", (previous,))
    leave_invalid_index(database_url, index, "message_value")
    migrate.upgrade(database_url, revision)  # the re-run
    assert index_state(database_url, index) == built
    with psycopg.connect(database_url, autocommit=True) as conn:
        version = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    assert version is not None and version[0] == revision
    migrate.upgrade(database_url)  # and on to the head
