"""What the store contract's parts share: the harness each store's tests provide, message and
node factories, and the arrange steps several tests take (parking a row, claiming one)."""

from __future__ import annotations

import threading
import uuid
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Protocol

from chronos.protocol import Headers, ScheduledMessage
from chronos.store import ClaimedRow, MessageRecord, Store

HORIZON = 1_000  # ms: claim rows due within a second
FAR = 3_600_000  # ms: an hour


class Harness(Protocol):
    store: Store

    def now(self) -> datetime:
        """The store's current time ("now()" of the SQL)."""

    def advance(self, ms: int) -> None:
        """Let ``ms`` milliseconds pass for the store."""

    def frozen(self) -> AbstractContextManager[datetime]:
        """The store's clock stands still inside: every statement sees the instant returned (on
        Postgres, the statements of this thread run in one transaction, whose now() it is), so
        a test can put a row exactly on a boundary of a time comparison."""


def node() -> str:
    return str(uuid.uuid4())


def msg(
    message_id: str,
    deadline: datetime,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: Headers | None = None,
) -> ScheduledMessage:
    return ScheduledMessage(message_id, deadline, key, value, list(headers or []))


def claimed(store: Store) -> list[MessageRecord]:
    return store.list_messages(state="claimed", park_attempts=5, limit=100)


def claims(rows: list[ClaimedRow]) -> list[tuple[str, datetime]]:
    return [(r.id, r.readied_at) for r in rows]


def park(harness: Harness, message_id: str, park_attempts: int = 2) -> None:
    """Enqueue a due message and fail its publish until ``release`` parks it."""
    store, me = harness.store, node()
    store.enqueue([msg(message_id, harness.now() + timedelta(milliseconds=500))], 0)
    for _ in range(park_attempts):
        rows = [r for r in store.claim(me, HORIZON, 100, park_attempts) if r.id == message_id]
        assert len(rows) == 1
        store.release(
            me, claims(rows), failed=True, errors=["refused"], park_attempts=park_attempts
        )


def claim_one(harness: Harness, message_id: str) -> None:
    """Make ``message_id`` due (by rescheduling it to now) and claim it."""
    store, me = harness.store, node()
    store.reschedule_message(message_id, 2, delay_ms=0)
    assert [r.id for r in store.claim(me, HORIZON, 10, 2)] == [message_id]


def claim_concurrently(
    store: Store, *, threads: int = 4, fair: bool = False
) -> tuple[list[str], list[BaseException]]:
    """``threads`` nodes claim 7 rows at a time, each on its own thread, until nothing is left:
    the ids every claim returned (all of them, in no order) and the errors the threads met."""
    taken: list[str] = []
    errors: list[BaseException] = []

    def worker() -> None:
        me = node()
        try:
            while rows := store.claim(me, HORIZON, 7, 5, fair=fair):
                taken.extend(r.id for r in rows)
        except BaseException as exc:  # noqa: BLE001 - returned to the test, which asserts on it
            errors.append(exc)

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(30)
    return taken, errors
