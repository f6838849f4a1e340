"""One harness per store, for the store contract: the store, its clock, and a way to set a row's
tenant column as a release before tenants (or any writer) would have left it."""

from __future__ import annotations

import time
from datetime import datetime

import psycopg

from chronos.store import PostgresStore
from chronos.testing import InMemoryStore, ManualClock


class MemoryHarness:
    """``chronos.testing.InMemoryStore`` on a manual clock: time moves only when told."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.store = InMemoryStore(self.clock)

    def now(self) -> datetime:
        return self.clock.now()

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    def set_tenant(self, message_id: str, tenant: str | None) -> None:
        self.store.set_tenant(message_id, tenant)


class PostgresHarness:
    """``PostgresStore`` on a real database: the database clock, which only real time moves."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.store = PostgresStore(url)

    def now(self) -> datetime:
        return self.store.ping()

    def advance(self, ms: int) -> None:
        time.sleep(ms / 1000)  # the database clock cannot be moved: let the time pass

    def set_tenant(self, message_id: str, tenant: str | None) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                "UPDATE chronos_messages SET tenant = %s WHERE id = %s", (tenant, message_id)
            )

    def close(self) -> None:
        self.store.close()
