"""One harness per store, for the store contract: the store, its clock, and ways to write as an
earlier release would have: a row's tenant column as a release before tenants (or any writer) left
it, a history record as the release before the history kept keys wrote it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime

import psycopg

from chronos.store import CancelOutcome, PostgresStore
from chronos.store.moves import PartitionMove
from chronos.testing import InMemoryStore, ManualClock

# The cancel_message statement of the release before the history kept keys (0013): its history
# insert names its columns, and leaves message_key NULL.
PREVIOUS_RELEASE_CANCEL = """
WITH deleted AS (
    DELETE FROM chronos_messages WHERE id = %(id)s AND readied_at IS NULL
    RETURNING id, tenant, deadline, recurrence
)
INSERT INTO chronos_history (id, tenant, outcome, deadline, reason, ended_by, recurring)
SELECT id, coalesce(tenant, ''), 'cancelled', deadline, 'admin', 'previous release',
       recurrence IS NOT NULL
FROM deleted
"""


class MemoryHarness:
    """``chronos.testing.InMemoryStore`` on a manual clock: time moves only when told."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.store = InMemoryStore(self.clock)

    def now(self) -> datetime:
        return self.clock.now()

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @contextmanager
    def frozen(self) -> Iterator[datetime]:
        yield self.clock.now()  # the manual clock moves only when told

    def set_tenant(self, message_id: str, tenant: str | None) -> None:
        self.store.set_tenant(message_id, tenant)

    def cancel_as_previous_release(self, message_id: str) -> None:
        done = self.store.cancel_message(message_id, by="previous release")
        assert done is CancelOutcome.CANCELLED
        self.store.forget_history_keys(message_id)

    def record_moves(self, shard: int, moves: list[PartitionMove]) -> None:
        self.store.shard, self.store.moves = shard, list(moves)


class FreezableStore(PostgresStore):
    """``PostgresStore`` whose statements can share one transaction, and so one now()."""

    @contextmanager
    def frozen(self) -> Iterator[datetime]:
        """Run this thread's statements in one transaction (committed at the end, rolled back
        on an error): Postgres gives each statement the transaction's start as now()."""
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            yield self.ping()
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


class PostgresHarness:
    """``PostgresStore`` on a real database: the database clock, which only real time moves
    (``frozen``: one transaction, one now())."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.store = FreezableStore(url)

    def now(self) -> datetime:
        return self.store.ping()

    def advance(self, ms: int) -> None:
        time.sleep(ms / 1000)  # the database clock cannot be moved: let the time pass

    def frozen(self) -> AbstractContextManager[datetime]:
        return self.store.frozen()

    def set_tenant(self, message_id: str, tenant: str | None) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                "UPDATE chronos_messages SET tenant = %s WHERE id = %s", (tenant, message_id)
            )

    def cancel_as_previous_release(self, message_id: str) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(PREVIOUS_RELEASE_CANCEL, {"id": message_id})

    def record_moves(self, shard: int, moves: list[PartitionMove]) -> None:
        """Record the database as ``shard`` of two, with ``moves`` (as ``chronos migrate`` and
        ``chronos shards move`` write them)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO chronos_shard (id, shard, shards, map) VALUES (1, %s, 2, 'mod')",
                (shard,),
            )
            for move in moves:
                conn.execute(
                    "INSERT INTO chronos_partition_moves (partition, shard, state, generation) "
                    "VALUES (%s, %s, %s, %s)",
                    tuple(move),
                )

    def close(self) -> None:
        self.store.close()
