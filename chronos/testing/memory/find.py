"""The in-memory store's operators' statements (find by filter, count, bulk cancel and
reschedule): a part of ``chronos.testing.InMemoryStore`` with the semantics of the named SQL
(``chronos.store.postgres.find``)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from chronos.store import DEFAULT_CANCEL_TTL_MS, MessageRecord
from chronos.store.filters import (
    BULK_BATCH,
    BulkBatch,
    MessageCount,
    MessageFilter,
    listed_bytes,
)
from chronos.store.history import Ending
from chronos.testing.memory.rows import StoredRow


def _state(row: StoredRow, park_attempts: int) -> str:
    if row.readied_at is not None:
        return "claimed"
    return "parked" if row.parked(park_attempts) else "waiting"


class InMemoryFind:
    """Find, count and bulk actions over ``InMemoryStore``'s rows."""

    _rows: dict[str, StoredRow]
    _cancels: dict[str, datetime]
    _lock: threading.RLock
    clock: Callable[[], datetime]

    def _statement(self, name: str) -> datetime:
        raise NotImplementedError  # InMemoryStore's: counts, injects failures, returns now()

    @staticmethod
    def _record(row: StoredRow, include_value: bool) -> MessageRecord:
        raise NotImplementedError  # InMemoryAdmin's

    def _ended(
        self,
        row: StoredRow,
        now: datetime,
        outcome: str,
        *,
        ending: Ending | None = None,
        node: str | None = None,
        by: str | None = None,
        reason: str | None = None,
        next_deadline: datetime | None = None,
    ) -> None:
        raise NotImplementedError  # InMemoryHistory's: the history record of an ended row

    def _matching(
        self,
        where: MessageFilter,
        park_attempts: int,
        after: tuple[datetime, str] | None,
        states: tuple[str, ...] = ("waiting", "parked", "claimed"),
    ) -> list[StoredRow]:
        chosen = [
            r
            for r in self._rows.values()
            if _state(r, park_attempts) in states
            and (where.state is None or _state(r, park_attempts) == where.state)
            and where.matches(
                tenant=r.tenant,
                topic=r.target_topic,
                message_id=r.id,
                key=r.key,
                deadline=r.deadline,
                recurring=r.recurrence is not None,
            )
            and (after is None or (r.deadline, r.id) > after)
        ]
        return sorted(chosen, key=lambda r: (r.deadline, r.id))

    def find_messages(
        self,
        where: MessageFilter,
        *,
        park_attempts: int,
        limit: int,
        after: tuple[datetime, str] | None = None,
        max_bytes: int | None = None,
    ) -> list[MessageRecord]:
        with self._lock:
            self._statement("find_messages")
            page: list[MessageRecord] = []
            running = 0
            for row in self._matching(where, park_attempts, after)[: max(0, limit)]:
                size = listed_bytes(row.key, row.headers)
                if max_bytes is not None and running >= max_bytes:
                    break  # the row that crossed the budget was the last one taken
                running += size
                page.append(dataclasses.replace(self._record(row, False), page_bytes=running))
            return page

    def count_messages(
        self, where: MessageFilter, *, park_attempts: int, count_limit: int
    ) -> MessageCount:
        with self._lock:
            self._statement("count_messages")
            matched = len(self._matching(where, park_attempts, None))
            # Past the limit Postgres estimates from a sample; the fake knows: its "estimate"
            # is the number itself, still marked as one.
            return MessageCount(matched, matched < count_limit)

    def bulk_cancel(
        self,
        where: MessageFilter,
        *,
        park_attempts: int,
        after: tuple[datetime, str] | None = None,
        cancel_ttl_ms: int = DEFAULT_CANCEL_TTL_MS,
        batch: int = BULK_BATCH,
        by: str | None = None,
    ) -> BulkBatch:
        with self._lock:
            now = self._statement("bulk_cancel")
            picked = self._matching(where, park_attempts, after)[:batch]
            done = claimed = 0
            for row in picked:
                self._cancels[row.id] = now + timedelta(milliseconds=cancel_ttl_ms)
                if row.readied_at is not None:
                    row.end_claimed()  # that occurrence is its last; a replacement is void
                    claimed += 1
                else:
                    del self._rows[row.id]
                    self._ended(row, now, "cancelled", reason="admin", by=by)
                    done += 1
            return _batch(picked, batch, done, claimed, now)

    def bulk_reschedule(
        self,
        where: MessageFilter,
        *,
        park_attempts: int,
        after: tuple[datetime, str] | None = None,
        since: datetime | None = None,
        deadline: datetime | None = None,
        shift_ms: int | None = None,
        fire_now: bool = False,
        batch: int = BULK_BATCH,
    ) -> BulkBatch:
        if [deadline is not None, shift_ms is not None, fire_now].count(True) != 1:
            raise ValueError("give exactly one of deadline, shift_ms and fire_now")
        with self._lock:
            now = self._statement("bulk_reschedule")
            picked = [
                r
                for r in self._matching(where, park_attempts, after, ("waiting",))
                if (since is None or r.enqueued_at <= since) and (not fire_now or r.deadline > now)
            ][:batch]
            last = (picked[-1].deadline, picked[-1].id) if len(picked) >= batch else None
            for row in picked:
                if fire_now:
                    row.deadline = now
                elif deadline is not None:
                    row.deadline = deadline
                else:
                    assert shift_ms is not None
                    row.deadline += timedelta(milliseconds=shift_ms)
                row.enqueued_at = now + timedelta(microseconds=1)  # the move (clock_timestamp())
            return BulkBatch(done=len(picked), claimed=0, after=last, now=now)


def _batch(
    picked: list[StoredRow], batch: int, done: int, claimed: int, now: datetime
) -> BulkBatch:
    return BulkBatch(
        done=done,
        claimed=claimed,
        after=(picked[-1].deadline, picked[-1].id) if len(picked) >= batch else None,
        now=now,
    )
