"""Throwaway databases on one Postgres server: one per test, cloned from a migrated template."""

from __future__ import annotations

import itertools
import os
import warnings
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from chronos.store import migrate


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` instead."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres", "postgresql+psycopg"):
        raise ValueError(f"expected a postgresql:// URL, got {parts.scheme or url!r}")
    return urlunsplit(parts._replace(path="/" + name))


class DatabaseFactory:
    """Creates and drops databases on the server of ``server_url``.

    Names carry the pid, so sessions sharing one external server do not collide.
    """

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self._counter = itertools.count(1)
        self._template: str | None = None

    def _admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.server_url, autocommit=True, connect_timeout=10)

    def create(self, *, template: str | None = None) -> str:
        """A new empty database (or a copy of ``template``); returns its URL."""
        name = f"chronos_test_{os.getpid()}_{next(self._counter)}"
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        with self._admin() as conn:
            conn.execute(statement)
        return with_database(self.server_url, name)

    def create_migrated(self) -> str:
        """A new database at the head revision, cloned from a template migrated once."""
        if self._template is None:
            name = f"chronos_template_{os.getpid()}"
            self.drop(name)
            with self._admin() as conn:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            migrate.upgrade(with_database(self.server_url, name))
            self._template = name
        return self.create(template=self._template)

    def drop(self, name_or_url: str) -> None:
        """Drop a database, disconnecting its sessions; warns instead of failing."""
        name = urlsplit(name_or_url).path.lstrip("/") if "://" in name_or_url else name_or_url
        statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        try:
            with self._admin() as conn:
                conn.execute(statement)
        except psycopg.Error as exc:
            warnings.warn(f"could not drop test database {name}: {exc}", stacklevel=2)

    def close(self) -> None:
        """Drop the template (call once, at the end of the session)."""
        if self._template is not None:
            self.drop(self._template)
            self._template = None
