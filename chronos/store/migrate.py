"""Schema migrations (alembic), callable from the CLI, the dev stack and the tests."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.operations import Operations
from psycopg import sql

from chronos.config.shards import ShardMap, describe, grows, record_mismatch
from chronos.errors import ConfigError


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


def upgrade_shard(database_url: str, shard: int, layout: ShardMap, revision: str = "head") -> None:
    """Upgrade shard ``shard``'s database of ``layout`` (``chronos migrate``, ``chronos dev``);
    at the head revision, record in it which shard it is (``record_shard``)."""
    upgrade(database_url, revision)
    if revision == "head":
        record_shard(database_url, shard, layout)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)


RECORDED_SHARD = sa.text("SELECT shard, shards, map FROM chronos_shard WHERE id = 1")
HOLDS_MESSAGES = sa.text("SELECT EXISTS (SELECT 1 FROM chronos_messages) AS holds")
RECORD_SHARD = sa.text(
    "INSERT INTO chronos_shard (id, shard, shards, map) VALUES (1, :shard, :shards, :map) "
    "ON CONFLICT (id) DO NOTHING"
)

REGROW_SHARD = sa.text(
    "UPDATE chronos_shard SET shards = :shards, map = :map, recorded_at = now() WHERE id = 1"
)


def record_shard(database_url: str, shard: int, layout: ShardMap) -> bool:
    """Record in the database (migrated to 0018 or later) that it is ``shard`` of ``layout``;
    True if written now, False if it was already (or one database: nothing is recorded, and a
    deployment that later spreads over several, drained first, records its shards then). A
    layout that adds databases and leaves every partition where it was (``grows``) is recorded
    in place of the old one.
    ConfigError if it is recorded as another shard or layout, or if, never recorded, it holds a
    one-shard deployment's messages and the layout has several shards: that would move
    partitions' messages away from their cancels."""
    engine = sa.create_engine(sqlalchemy_url(database_url))
    try:
        with engine.begin() as conn:
            row = conn.execute(RECORDED_SHARD).first()
            if row is None and layout.shards == 1:
                return False  # one database is no shard: nothing to record, sharded later
            if row is None and layout.shards > 1 and conn.execute(HOLDS_MESSAGES).scalar():
                wanted = describe(shard, layout.shards, layout.spec)
                raise ConfigError(
                    f"database {shard} of CHRONOS_DATABASE_URL holds the messages of a "
                    f"deployment on one database: making it {wanted} "
                    "would move some partitions' messages away from their cancels (moving "
                    "partitions: docs/shards.md)"
                )
            recorded = None if row is None else (row.shard, row.shards, row.map)
            if recorded is not None:
                if grows(recorded, shard, layout):  # databases added, no partition moved
                    conn.execute(REGROW_SHARD, {"shards": layout.shards, "map": layout.spec})
                    return True
                mismatch = record_mismatch(recorded, shard, layout)
                if mismatch is not None:
                    raise ConfigError(mismatch)
                return False
            conn.execute(
                RECORD_SHARD, {"shard": shard, "shards": layout.shards, "map": layout.spec}
            )
            return True
    finally:
        engine.dispose()


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


# The partitions of `parent` without an index attached to the parent's `index`: the ones still to
# build.
UNINDEXED_PARTITIONS = sa.text(
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
    "WHERE i.inhparent = to_regclass(:parent) "
    "AND NOT EXISTS (SELECT 1 FROM pg_index x JOIN pg_inherits xi ON xi.inhrelid = x.indexrelid "
    "                WHERE x.indrelid = c.oid AND xi.inhparent = to_regclass(:index)) "
    "ORDER BY c.relname"
)


def index_partitions(
    op: Operations, parent: str, index: str, definition: sql.Composable, suffix: str
) -> None:
    """Index partitioned table ``parent`` without holding its writes: ``CREATE INDEX index ON ONLY
    parent definition`` (no partition read: an instant), then each partition's own built
    CONCURRENTLY (named ``<partition><suffix>``) and attached; once every partition has one, the
    parent's is valid. A partition created meanwhile gets it when it is attached. Re-runnable: a
    partition whose build was interrupted (INVALID) is built again, one built but not attached is
    attached, the others are skipped. ``definition`` is the column list and any ``WHERE``.
    Call it inside the migration's autocommit block."""
    bind = op.get_bind()
    raw = driver_connection(op)
    raw.execute(
        sql.SQL("CREATE INDEX IF NOT EXISTS {} ON ONLY {} {}").format(
            sql.Identifier(index), sql.Identifier(parent), definition
        )
    )
    missing = bind.execute(UNINDEXED_PARTITIONS, {"parent": parent, "index": index})
    for partition in missing.scalars().all():
        name = partition[: 63 - len(suffix)] + suffix  # within the 63 bytes of an identifier
        drop_invalid_index(op, name, partition)
        raw.execute(
            sql.SQL("CREATE INDEX CONCURRENTLY IF NOT EXISTS {} ON {} {}").format(
                sql.Identifier(name), sql.Identifier(partition), definition
            )
        )
        raw.execute(
            sql.SQL("ALTER INDEX {} ATTACH PARTITION {}").format(
                sql.Identifier(index), sql.Identifier(name)
            )
        )


DROP_LOCK_TIMEOUT = "SET lock_timeout = '2s'"
DROP_TRIES = 10


def drop_partitioned_index(op: Operations, index: str) -> None:
    """Drop partitioned index ``index`` (and its partitions'). It cannot be dropped CONCURRENTLY,
    so the drop takes the table's lock for an instant, waiting at most 2 s for it (a long
    transaction on the table) and trying again ``DROP_TRIES`` times, a second apart, before it
    fails; a re-run goes on from there. Call it inside the migration's autocommit block."""
    raw = driver_connection(op)
    for attempt in range(1, DROP_TRIES + 1):
        try:
            raw.execute(DROP_LOCK_TIMEOUT)
            raw.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(index)))
            return
        except psycopg.errors.LockNotAvailable:
            if attempt == DROP_TRIES:
                raise
            time.sleep(1)
        finally:
            raw.execute("RESET lock_timeout")


def driver_connection(op: Operations) -> psycopg.Connection[Any]:
    """The migration's psycopg connection, for statements composed with ``psycopg.sql`` (names
    quoted as identifiers, never formatted into the text)."""
    raw = op.get_bind().connection.driver_connection
    assert isinstance(raw, psycopg.Connection)
    return raw
