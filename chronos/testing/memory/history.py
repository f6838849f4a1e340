"""The in-memory store's history of ended messages, with the semantics of the Postgres store's
(``chronos.store.postgres.history`` and the statements that end messages): a record is written
only while the history is on and its day has a "partition" (the leader's maintenance creates
them ahead, each with the TTL of its day, and drops whole days past it)."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from itertools import groupby

from chronos.store import (
    EndedOnArrival,
    EndedRecord,
    Ending,
    HistorySummary,
    Maintenance,
    MessageFilter,
)
from chronos.store.history import (
    REASON_LENGTH,
    Partition,
    days_to_create,
    page_weight,
    partition_name,
)
from chronos.testing.memory.rows import StoredRow, check_uuid


class InMemoryHistory:
    """``chronos_history`` of ``InMemoryStore``."""

    history: bool
    _history: list[EndedRecord]
    _partitions: dict[date, timedelta]  # day -> the TTL its partition was created with
    unrecorded: int  # records not written: no partition for their day
    _lock: threading.RLock

    def _statement(self, name: str) -> datetime:
        raise NotImplementedError  # InMemoryStore's bookkeeping

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
        """Record a row that ends now (the caller holds the lock), as the statement that ends
        it would."""
        if not self.history:
            return
        if now.astimezone(UTC).date() not in self._partitions:
            self.unrecorded += 1
            return
        self._history.append(
            EndedRecord(
                id=row.id,
                tenant=row.tenant or "",
                outcome=ending.outcome if ending else outcome,
                deadline=row.deadline,
                ended_at=now,
                topic=ending.topic if ending else None,
                partition=ending.partition if ending else None,
                offset=ending.offset if ending else None,
                lateness_ms=ending.lateness_ms if ending else None,
                node=node,
                attempt=min(row.attempts + 1, 32767) if ending else None,
                reason=(ending.reason if ending else reason),
                ended_by=None if by is None else by[:255],
                next_deadline=next_deadline,
                recurring=row.recurrence is not None,
                key=row.key,
            )
        )

    def record_ended(self, node_id: str, ended: Sequence[EndedOnArrival]) -> int:
        if not ended or not self.history:
            return 0
        with self._lock:
            now = self._statement("record_ended")
            node = check_uuid(node_id, "record_ended")
            if now.astimezone(UTC).date() not in self._partitions:
                self.unrecorded += len(ended)  # the statement fails whole: counted, not raised
                return 0
            for e in ended:
                end = e.ending
                self._history.append(
                    EndedRecord(
                        id=e.id,
                        tenant=e.tenant or "",
                        outcome=end.outcome,
                        deadline=e.deadline,
                        ended_at=now,
                        topic=end.topic,
                        partition=end.partition,
                        offset=end.offset,
                        lateness_ms=end.lateness_ms,
                        node=node,
                        attempt=None if e.attempt is None else min(e.attempt, 32767),
                        reason=None if end.reason is None else end.reason[:REASON_LENGTH],
                        ended_by=None,
                        next_deadline=None,
                        recurring=e.recurring,
                        key=e.key,
                    )
                )
            return len(ended)

    def maintain_history(self, ttl: timedelta, *, at: datetime | None = None) -> Maintenance:
        now = self._statement("history_partitions") if at is None else at
        dropped = []
        for day, kept in sorted(self._partitions.items()):
            if kept and Partition(day, kept).expired(now):
                del self._partitions[day]
                self._history = [
                    r for r in self._history if r.ended_at.astimezone(UTC).date() != day
                ]
                dropped.append(partition_name(day))
        created = []
        if ttl > timedelta(0):
            for day in days_to_create(now):
                if day not in self._partitions:
                    self._partitions[day] = ttl
                    created.append(partition_name(day))
        return Maintenance(created, dropped, [], [], len(self._partitions))

    def history_days(self) -> dict[date, timedelta]:
        """The days with a partition and their TTLs (a test convenience)."""
        return dict(self._partitions)

    def forget_history_keys(self, message_id: str) -> None:
        """Clear the key of ``message_id``'s records, as the release before the history kept
        keys wrote them (a test convenience)."""
        with self._lock:
            self._history = [
                dataclasses.replace(r, key=None) if r.id == message_id else r for r in self._history
            ]

    def ended_messages(self, message_id: str, *, limit: int = 20) -> list[EndedRecord]:
        self._statement("ended_message")
        found = [r for r in self._history if r.id == message_id]
        found.sort(key=lambda r: r.ended_at, reverse=True)
        return found[:limit]

    def find_ended(
        self,
        where: MessageFilter,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        max_bytes: int | None = None,
    ) -> list[EndedRecord]:
        self._statement("find_ended")
        wanted = set(where.outcomes)

        def matches(r: EndedRecord) -> bool:
            if r.outcome not in wanted:
                return False
            if where.tenant is not None and (r.tenant or "") != where.tenant:
                return False
            if where.topic is not None and r.topic != where.topic:
                return False
            if where.id_prefix is not None and not r.id.startswith(where.id_prefix):
                return False
            if where.key is not None and not _key_matches(where, r.key):
                return False
            if where.deadline_from is not None and r.deadline < where.deadline_from:
                return False
            if where.deadline_to is not None and r.deadline >= where.deadline_to:
                return False
            if where.recurring is not None and r.recurring != where.recurring:
                return False
            return after is None or (r.deadline, r.id) > after

        found = sorted(
            (r for r in self._history if matches(r)), key=lambda r: (r.deadline, r.id, r.ended_at)
        )[:limit]
        if max_bytes is None:
            return found
        page: list[EndedRecord] = []
        before = 0
        # A message's records (sorted together) weigh together: all of them or none.
        for _, group in groupby(found, key=lambda r: (r.deadline, r.id)):
            if before >= max_bytes:
                break
            records = list(group)
            page.extend(records)
            before += sum(page_weight(r) for r in records)
        return page

    def summarize_history(
        self,
        since: datetime,
        until: datetime | None = None,
        *,
        tenant: str | None = None,
        limit: int = 1000,
    ) -> list[HistorySummary]:
        self._statement("summarize_history")
        groups: dict[tuple[str, str], list[EndedRecord]] = {}
        for r in self._history:
            if r.ended_at < since or (until is not None and r.ended_at >= until):
                continue
            if tenant is not None and (r.tenant or "") != tenant:
                continue
            groups.setdefault((r.tenant or "", r.outcome), []).append(r)
        summaries = []
        for (name, outcome), records in sorted(groups.items()):
            late = sorted(r.lateness_ms for r in records if r.lateness_ms is not None)
            fired = outcome == "fired" and bool(late)
            summaries.append(
                HistorySummary(
                    name,
                    outcome,
                    len(records),
                    percentile_cont(late, 0.5) if fired else None,
                    percentile_cont(late, 0.99) if fired else None,
                )
            )
        return summaries[:limit]

    def count_tenant_history(self, tenant: str, *, limit: int) -> int:
        self._statement("count_tenant_history")
        return min(limit, sum(1 for r in self._history if (r.tenant or "") == tenant))

    def delete_tenant_history(self, tenant: str, *, batch: int) -> int:
        self._statement("delete_tenant_history")
        ids = list(dict.fromkeys(r.id for r in self._history if (r.tenant or "") == tenant))[:batch]
        chosen = set(ids)
        kept = [r for r in self._history if not ((r.tenant or "") == tenant and r.id in chosen)]
        gone = len(self._history) - len(kept)
        self._history = kept
        return gone


def _key_matches(where: MessageFilter, key: bytes | None) -> bool:
    """``where``'s key filter (exact, or a prefix) on a record's key: never one without a key."""
    if key is None or where.key is None:
        return False
    return key.startswith(where.key) if where.key_prefix else key == where.key


def percentile_cont(ordered: list[int], fraction: float) -> float:
    """Postgres's ``percentile_cont``: linear interpolation between the nearest ranks."""
    position = fraction * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
