"""The operators' statements on the Postgres store: find messages by filter (a page and a
count) and act on them in bounded batches (cancel, reschedule, fire now). ``PostgresStore``
inherits them; they are off the hot path."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from chronos.store.filters import (
    BULK_BATCH,
    SAMPLE_ROWS,
    BulkBatch,
    MessageCount,
    MessageFilter,
)
from chronos.store.postgres.admin import message_record
from chronos.store.types import DEFAULT_CANCEL_TTL_MS, UNBOUNDED_BYTES, MessageRecord


class FindQueries:
    """``find_messages``, ``count_messages``, ``bulk_cancel`` and ``bulk_reschedule``."""

    def _execute(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError  # PostgresStore runs the named statement

    def _recording_rows(
        self, name: str, params: dict[str, Any], records: int
    ) -> list[dict[str, Any]]:
        raise NotImplementedError  # HistoryQueries: the statement, its history record too

    def find_messages(
        self,
        where: MessageFilter,
        *,
        park_attempts: int,
        limit: int,
        after: tuple[datetime, str] | None = None,
        max_bytes: int | None = None,
    ) -> list[MessageRecord]:
        rows = self._execute(
            "find_messages",
            {
                **where.params(),
                **_cursor(after),
                "park_attempts": park_attempts,
                "limit": limit,
                "max_bytes": UNBOUNDED_BYTES if max_bytes is None else max_bytes,
            },
        )
        return [message_record(r) for r in rows]

    def count_messages(
        self, where: MessageFilter, *, park_attempts: int, count_limit: int
    ) -> MessageCount:
        rows = self._execute(
            "count_messages",
            {
                **where.params(),
                **_cursor(None),
                "park_attempts": park_attempts,
                "count_limit": count_limit,
            },
        )
        matched = int(rows[0]["matched"])
        if matched < count_limit:
            return MessageCount(matched, True)
        # Past the limit, an estimate: the share matching in a sample of about SAMPLE_ROWS
        # rows (whole pages) times the planner's row count; never below what was counted.
        table_rows = int(self._execute("table_rows", {})[0]["n"])
        percent = min(100.0, 100.0 * SAMPLE_ROWS / max(table_rows, 1))
        sampled = self._execute(
            "estimate_messages",
            {**where.params(), "park_attempts": park_attempts, "sample_percent": percent},
        )
        # The share matching in the sample times the table's rows: the sample's own size
        # varies with the pages it drew, the share far less.
        matched, total = int(sampled[0]["matched"]), int(sampled[0]["sampled"])
        if percent < 100.0:
            matched = round(matched / max(total, 1) * table_rows)
        return MessageCount(max(count_limit, matched), False)

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
        rows = self._recording_rows(
            "bulk_cancel",
            {
                **where.params(),
                **_cursor(after),
                "park_attempts": park_attempts,
                "cancel_ttl_ms": cancel_ttl_ms,
                "batch": batch,
                "by": by,
            },
            records=batch,
        )
        return _batch(rows[0], batch)

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
        rows = self._execute(
            "bulk_reschedule",
            {
                **where.params(),
                **_cursor(after),
                "park_attempts": park_attempts,
                "since": since,
                "deadline": deadline,
                "shift_ms": shift_ms,
                "fire_now": fire_now,
                "batch": batch,
            },
        )
        return _batch(rows[0], batch)


def _cursor(after: tuple[datetime, str] | None) -> dict[str, Any]:
    return {
        "after_deadline": after[0] if after else None,
        "after_id": after[1] if after else None,
    }


def _batch(r: dict[str, Any], batch: int) -> BulkBatch:
    more = int(r["picked"]) >= batch and r["last_id"] is not None
    return BulkBatch(
        done=int(r["done"]),
        claimed=int(r["claimed"]),
        after=(r["last_deadline"], r["last_id"]) if more else None,
        now=r["now"],
    )
