"""Schema migrations (alembic), callable from the CLI, the dev stack and the tests."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.operations import Operations


def migrations_dir() -> Path:
    """``migrations/`` of a source checkout, or the copy packaged into the wheel."""
    packaged = Path(__file__).resolve().parents[1] / "_migrations"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "migrations"


def sqlalchemy_url(url: str) -> str:
    """SQLAlchemy needs the psycopg 3 dialect named explicitly."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["database_url"] = database_url
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)


INVALID_INDEX = sa.text(
    "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
    "WHERE c.relname = :name AND pg_table_is_visible(c.oid)"
)


def drop_invalid_index(op: Operations, name: str, table: str) -> bool:
    """Drop index ``name`` if an interrupted ``CREATE INDEX CONCURRENTLY`` left it INVALID (it
    exists, is maintained by every write, but is never used), so that the migration builds it
    again instead of skipping it as existing. Call it inside the migration's autocommit block.
    True if it dropped one."""
    if not op.get_bind().execute(INVALID_INDEX, {"name": name}).scalar():
        return False
    op.drop_index(name, table_name=table, postgresql_concurrently=True, if_exists=True)
    return True
