"""Migration 0002 (the nodes table and the index of failed rows): upgrade and downgrade keep the
messages."""

from __future__ import annotations

import psycopg
import pytest

from chronos.store import migrate

pytestmark = pytest.mark.integration


def _tables_and_indexes(url: str) -> tuple[set[str], set[str]]:
    with psycopg.connect(url) as conn:
        tables = {
            r[0]
            for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
        indexes = {
            r[0]
            for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")
        }
    return tables, indexes


def test_migration_0002_upgrades_and_downgrades_keeping_messages(database_url: str) -> None:
    migrate.upgrade(database_url, "0001")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO chronos_messages (id, deadline, attempts) "
            "VALUES ('keep', now() + interval '1 day', 3)"
        )
    migrate.upgrade(database_url, "0002")
    tables, indexes = _tables_and_indexes(database_url)
    assert "chronos_nodes" in tables
    assert "chronos_messages_failed_idx" in indexes
    with psycopg.connect(database_url) as conn:
        (valid,) = conn.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = "
            "'chronos_messages_failed_idx'::regclass"
        ).fetchone() or (False,)
    assert valid
    migrate.downgrade(database_url, "0001")
    tables, indexes = _tables_and_indexes(database_url)
    assert "chronos_nodes" not in tables and "chronos_messages_failed_idx" not in indexes
    assert "chronos_messages" in tables
    migrate.upgrade(database_url)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT id FROM chronos_messages").fetchall() == [("keep",)]
    migrate.downgrade(database_url)
    assert _tables_and_indexes(database_url)[0] <= {"alembic_version"}
