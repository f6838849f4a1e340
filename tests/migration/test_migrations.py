"""Migrations: an empty database upgraded to head matches ``chronos.store.schema``; downgrades work.

The comparison is made twice: alembic's autogenerate diff against the metadata, and the
Postgres catalog of the migrated database against a database built by ``metadata.create_all``
(which also sees what autogenerate ignores: partial-index predicates, defaults, comments).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool

from chronos.store import migrate
from chronos.store.schema import metadata
from tests.support import DatabaseFactory

pytestmark = pytest.mark.integration


def _engine(url: str) -> Any:
    return create_engine(migrate.sqlalchemy_url(url), poolclass=pool.NullPool)


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        return {r[0] for r in rows.fetchall()}


def _version(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        exists = conn.execute("SELECT to_regclass('public.alembic_version')").fetchone()
        if exists is None or exists[0] is None:
            return []
        return [r[0] for r in conn.execute("SELECT version_num FROM alembic_version").fetchall()]


CATALOG_QUERIES = {
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), col_description(c.oid, a.attnum)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND a.attnum > 0
          AND NOT a.attisdropped AND c.relname <> 'alembic_version'
        ORDER BY 1, 2
    """,
    "indexes": """
        SELECT tablename, indexname, indexdef
        FROM pg_indexes
        WHERE schemaname = 'public' AND tablename <> 'alembic_version'
        ORDER BY 1, 2
    """,
    "constraints": """
        SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid)
        FROM pg_constraint k
        JOIN pg_class c ON c.oid = k.conrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relname <> 'alembic_version'
        ORDER BY 1, 2
    """,
    "table_comments": """
        SELECT c.relname, obj_description(c.oid, 'pg_class')
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname <> 'alembic_version'
        ORDER BY 1
    """,
}


def _catalog(url: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as conn:
        return {name: conn.execute(text).fetchall() for name, text in CATALOG_QUERIES.items()}


@pytest.fixture
def reference_url(database_factory: DatabaseFactory) -> Iterator[str]:
    """A database built straight from the metadata, as the migrations should build it."""
    url = database_factory.create()
    engine = _engine(url)
    metadata.create_all(engine)
    engine.dispose()
    yield url
    database_factory.drop(url)


def test_there_is_one_head_and_a_linear_history() -> None:
    script = ScriptDirectory.from_config(migrate.alembic_config("postgresql://unused/x"))
    assert len(script.get_heads()) == 1
    revisions = list(script.walk_revisions())
    assert revisions[-1].down_revision is None
    for newer, older in itertools.pairwise(revisions):
        assert newer.down_revision == older.revision


def test_upgrade_of_an_empty_database_matches_the_schema(database_url: str) -> None:
    assert _tables(database_url) == set()
    migrate.upgrade(database_url)
    assert set(metadata.tables) <= _tables(database_url)
    engine = _engine(database_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn, opts={"compare_type": True, "compare_server_default": True}
            )
            diff = compare_metadata(context, metadata)
    finally:
        engine.dispose()
    assert diff == [], f"migrations and chronos.store.schema differ: {diff}"


def test_migrated_catalog_equals_the_catalog_built_from_the_metadata(
    database_url: str, reference_url: str
) -> None:
    migrate.upgrade(database_url)
    migrated, reference = _catalog(database_url), _catalog(reference_url)
    assert reference["columns"] and reference["indexes"] and reference["constraints"]
    for part in CATALOG_QUERIES:
        assert migrated[part] == reference[part], part


def test_downgrade_to_base_removes_everything_and_upgrade_again_works(database_url: str) -> None:
    migrate.upgrade(database_url)
    head = _version(database_url)
    assert len(head) == 1
    migrate.downgrade(database_url, "base")
    assert _tables(database_url) <= {"alembic_version"}
    assert _version(database_url) == []
    migrate.upgrade(database_url)
    assert _version(database_url) == head


def test_every_revision_upgrades_and_downgrades_one_step_at_a_time(database_url: str) -> None:
    script = ScriptDirectory.from_config(migrate.alembic_config(database_url))
    chain = [r.revision for r in reversed(list(script.walk_revisions()))]
    for revision in chain:
        migrate.upgrade(database_url, revision)
        assert _version(database_url) == [revision]
    for revision in reversed(chain):
        before = _catalog(database_url)
        migrate.downgrade(database_url, "-1")
        migrate.upgrade(database_url, revision)
        assert _catalog(database_url) == before, f"{revision}: down then up is not a no-op"
        migrate.downgrade(database_url, "-1")
    assert _version(database_url) == []
    assert _tables(database_url) <= {"alembic_version"}


def test_upgrade_is_idempotent_at_head(migrated_database_url: str) -> None:
    head = _version(migrated_database_url)
    migrate.upgrade(migrated_database_url)
    assert _version(migrated_database_url) == head
