"""The scratch Postgres the probes measure on: an embedded server in a temporary directory,
migrated databases on it, and the SQL that fills them.

Everything lives under one temporary directory that is removed with the server, so a probe
never touches a database of its own or anyone else's. Fill scripts are SQL of the probe's own
(``generate_series`` over ``chronos_messages``), run statement by statement in autocommit.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import psycopg
from psycopg import sql

from chronos.embedded import EmbeddedPostgres
from chronos.store import migrate

KNOWN_TENANTS = (
    "INSERT INTO chronos_tenants (tenant) SELECT DISTINCT tenant FROM chronos_messages "
    "ON CONFLICT DO NOTHING"
)
"""Every tenant of the rows in ``chronos_messages`` known, as intake would have recorded it."""


@contextmanager
def scratch_server(name: str, *, durable: bool = True) -> Iterator[str]:
    """An embedded Postgres in a fresh temporary directory (``chronos-<name>-…``); yields the
    URL of its ``postgres`` database (not migrated). ``durable=False``: fsync off."""
    with tempfile.TemporaryDirectory(prefix=f"chronos-{name}-") as tmp:
        workspace = Path(tmp)
        with EmbeddedPostgres(workspace / "postgres", durable=durable, workspace=workspace) as pg:
            yield pg.url


@contextmanager
def scratch_postgres(name: str, *, durable: bool = True) -> Iterator[str]:
    """``scratch_server`` with its ``postgres`` database migrated; yields that database's URL."""
    with scratch_server(name, durable=durable) as url:
        migrate.upgrade(url)
        yield url


def scratch_database(server_url: str, prefix: str) -> str:
    """A fresh, migrated database ``<prefix>_<random>`` on the server; returns its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = server_url.rsplit("/", 1)[0] + "/" + name
    migrate.upgrade(url)
    return url


def run_sql(url: str, script: str, params: Mapping[str, object] | None = None) -> None:
    """Run ``script`` statement by statement (statements end with ``;`` at the end of a line),
    each with ``params``, in autocommit."""
    statements = [s.strip() for s in script.strip().split(";\n") if s.strip()]
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.rstrip(";"), params)  # the probe's own statements


def server_now(url: str) -> datetime:
    """The server's ``now()``."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    now: datetime = row[0]
    return now


def row_count(url: str) -> int:
    """The rows in ``chronos_messages``."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM chronos_messages").fetchone()
    assert row is not None
    return int(row[0])
