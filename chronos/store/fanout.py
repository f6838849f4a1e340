"""The admin API's store over several shards (docs/shards.md): what an operator asks of Chronos
is asked of every shard, and the answers merged as one database would give them.

- **Reads** fan out, one shard after another: a message is found in the shard that holds it;
  pages are merged in their (deadline, id) order by the same keyset cursor (``_merged``: a
  shard's page that may have stopped early, at its limit or its byte budget, bounds the merged
  page, so that no row of it is skipped); counts and backlogs are summed.
- **Actions** on one message go to the shard that holds it; a cancel leaves its marker in every
  shard (a Kafka schedule of that id may reach any of them: its key chooses). Bulk actions run
  batch by batch in every shard, the next batch after the merged cursor.
- **Pauses and limits** are written to every shard (each shard's firing reads its own) and read
  from shard 0. A limit applies in each shard: N shards fire a limited tenant up to N times its
  rate (docs/shards.md).
- **A shard that does not answer** fails the request with a StoreError naming it: an answer is
  never silently missing a shard's part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from chronos.errors import StoreError
from chronos.store.backlog import Backlog, TenantBacklogs
from chronos.store.filters import BulkBatch, MessageCount, MessageFilter
from chronos.store.flow import Limit, Pause, PauseKind
from chronos.store.history import EndedRecord, HistorySummary, page_weight
from chronos.store.types import (
    CancelOutcome,
    MessageRecord,
    NodeRecord,
    RequeueOutcome,
    RescheduleOutcome,
    Store,
)

_T = TypeVar("_T")
_R = TypeVar("_R", MessageRecord, EndedRecord)


def _cursor_of(row: MessageRecord | EndedRecord) -> tuple[datetime, str]:
    return (row.deadline, row.id)


def _merged(
    pages: Sequence[list[_R]],
    limit: int,
    full: Callable[[list[_R]], bool],
    order: Callable[[_R], Any],
) -> list[_R]:
    """The shards' pages (each in order, each after the same cursor) as one page in ``order``.
    A page that ``full`` says may have stopped early hides rows after its last one: the merged
    page stops at the earliest such last row (inclusive), then at ``limit``."""
    bound = min((_cursor_of(page[-1]) for page in pages if page and full(page)), default=None)
    rows = sorted((row for page in pages for row in page), key=order)
    if bound is not None:
        rows = [row for row in rows if _cursor_of(row) <= bound]
    return rows[:limit]


class ShardedStore:
    """The admin API's ``Store`` over ``stores`` (shard 0 first)."""

    def __init__(self, stores: Sequence[Store]) -> None:
        self.stores = list(stores)

    @property
    def history(self) -> bool:
        return bool(getattr(self.stores[0], "history", False))

    def _each(self, call: Callable[[Store], _T]) -> list[_T]:
        """``call`` on every shard, in order; a shard's failure names it."""
        return [self._named(shard, call) for shard in range(len(self.stores))]

    def release_thread_connection(self) -> None:
        for store in self.stores:
            release = getattr(store, "release_thread_connection", None)
            if release is not None:
                release()

    def close(self) -> None:
        """The stores are the node's lanes': closed with them, not here."""

    def ping(self) -> datetime:
        """The database clock of the first shard that answers; StoreError if none does."""
        failure: StoreError | None = None
        for store in self.stores:
            try:
                return store.ping()
            except StoreError as exc:
                failure = failure or exc
        assert failure is not None
        raise failure

    def shards_away(self) -> list[int]:
        """The shards whose database does not answer a ping now."""
        away = []
        for shard, store in enumerate(self.stores):
            try:
                store.ping()
            except StoreError:
                away.append(shard)
        return away

    # -- one message -----------------------------------------------------------------------

    def get_message(self, message_id: str, *, include_value: bool = False) -> MessageRecord | None:
        for found in self._each(lambda s: s.get_message(message_id, include_value=include_value)):
            if found is not None:
                return found
        return None

    def cancel_message(
        self, message_id: str, cancel_ttl_ms: int = 0, *, by: str | None = None
    ) -> CancelOutcome:
        outcomes = self._each(lambda s: s.cancel_message(message_id, cancel_ttl_ms, by=by))
        for wanted in (CancelOutcome.CANCELLED, CancelOutcome.CLAIMED):
            if wanted in outcomes:
                return wanted
        return CancelOutcome.NOT_FOUND

    def requeue_message(self, message_id: str, park_attempts: int) -> RequeueOutcome:
        for shard in range(len(self.stores)):
            outcome = self._named(shard, lambda s: s.requeue_message(message_id, park_attempts))
            if outcome is not RequeueOutcome.NOT_FOUND:
                return outcome
        return RequeueOutcome.NOT_FOUND

    def reschedule_message(
        self,
        message_id: str,
        park_attempts: int,
        *,
        deadline: datetime | None = None,
        delay_ms: int | None = None,
    ) -> tuple[RescheduleOutcome, MessageRecord | None]:
        for shard in range(len(self.stores)):
            outcome = self._named(
                shard,
                lambda s: s.reschedule_message(
                    message_id, park_attempts, deadline=deadline, delay_ms=delay_ms
                ),
            )
            if outcome[0] is not RescheduleOutcome.NOT_FOUND:
                return outcome
        return RescheduleOutcome.NOT_FOUND, None

    def _named(self, shard: int, call: Callable[[Store], _T]) -> _T:
        try:
            return call(self.stores[shard])
        except StoreError as exc:
            raise StoreError(
                f"shard {shard} did not answer: {exc}",
                retryable=exc.retryable,
                outage=exc.outage,
                refused=exc.refused,
                sqlstate=exc.sqlstate,
                shard=shard,
            ) from exc

    def ended_messages(self, message_id: str, *, limit: int = 20) -> list[EndedRecord]:
        records = [
            r for rs in self._each(lambda s: s.ended_messages(message_id, limit=limit)) for r in rs
        ]
        return sorted(records, key=lambda r: r.ended_at, reverse=True)[:limit]

    # -- pages and counts ----------------------------------------------------------------------

    def find_messages(
        self,
        where: MessageFilter,
        *,
        park_attempts: int,
        limit: int,
        after: tuple[datetime, str] | None = None,
        max_bytes: int | None = None,
    ) -> list[MessageRecord]:
        pages = self._each(
            lambda s: s.find_messages(
                where, park_attempts=park_attempts, limit=limit, after=after, max_bytes=max_bytes
            )
        )
        return self._messages_page(pages, limit, max_bytes)

    def list_messages(
        self,
        *,
        state: str | None,
        park_attempts: int,
        limit: int,
        deadline_from: datetime | None = None,
        deadline_to: datetime | None = None,
        after: tuple[datetime, str] | None = None,
        max_bytes: int | None = None,
    ) -> list[MessageRecord]:
        pages = self._each(
            lambda s: s.list_messages(
                state=state,
                park_attempts=park_attempts,
                limit=limit,
                deadline_from=deadline_from,
                deadline_to=deadline_to,
                after=after,
                max_bytes=max_bytes,
            )
        )
        return self._messages_page(pages, limit, max_bytes)

    @staticmethod
    def _messages_page(
        pages: list[list[MessageRecord]], limit: int, max_bytes: int | None
    ) -> list[MessageRecord]:
        """Merged, with each row's ``page_bytes`` the running sum of the merged page, cut as a
        shard cuts its own: rows while the bytes before them stay under ``max_bytes``."""
        own: dict[int, int] = {}
        for page in pages:
            before = 0
            for row in page:
                own[id(row)], before = row.page_bytes - before, row.page_bytes

        def full(page: list[MessageRecord]) -> bool:
            return len(page) >= limit or (
                max_bytes is not None and page[-1].page_bytes >= max_bytes
            )

        merged, total = [], 0
        for row in _merged(pages, limit, full, _cursor_of):
            if max_bytes is not None and total >= max_bytes:
                break
            total += own[id(row)]
            merged.append(dataclasses.replace(row, page_bytes=total))
        return merged

    def find_ended(
        self,
        where: MessageFilter,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        max_bytes: int | None = None,
    ) -> list[EndedRecord]:
        pages = self._each(
            lambda s: s.find_ended(where, limit=limit, after=after, max_bytes=max_bytes)
        )

        def full(page: list[EndedRecord]) -> bool:
            weight = sum(page_weight(r) for r in page)
            return len(page) >= limit or (max_bytes is not None and weight >= max_bytes)

        merged = _merged(pages, limit, full, lambda r: (r.deadline, r.id, r.ended_at))
        if max_bytes is None:
            return merged
        kept, weight, last = [], 0, None
        for record in merged:  # a message's records all or none, as a shard keeps them
            if _cursor_of(record) != last and weight >= max_bytes:
                break
            last = _cursor_of(record)
            weight += page_weight(record)
            kept.append(record)
        return kept

    def count_messages(
        self, where: MessageFilter, *, park_attempts: int, count_limit: int
    ) -> MessageCount:
        counts = self._each(
            lambda s: s.count_messages(where, park_attempts=park_attempts, count_limit=count_limit)
        )
        return MessageCount(sum(c.count for c in counts), all(c.exact for c in counts))

    def backlog(self, park_attempts: int, **kwargs: Any) -> Backlog:
        parts = self._each(lambda s: s.backlog(park_attempts, **kwargs))
        first = parts[0]

        def earliest(values: list[datetime | None]) -> datetime | None:
            return min((v for v in values if v is not None), default=None)

        estimates = [p.estimated_rows for p in parts]
        return dataclasses.replace(
            first,
            estimated_rows=None if None in estimates else sum(e or 0 for e in estimates),
            unclaimed=sum(p.unclaimed for p in parts),
            unclaimed_exact=all(p.unclaimed_exact for p in parts),
            claimed=sum(p.claimed for p in parts),
            parked=sum(p.parked for p in parts),
            parked_capped=any(p.parked_capped for p in parts),
            overdue=sum(p.overdue for p in parts),
            overdue_capped=any(p.overdue_capped for p in parts),
            oldest_overdue=earliest([p.oldest_overdue for p in parts]),
            oldest_deadline=earliest([p.oldest_deadline for p in parts]),
            newest_deadline=max(
                (p.newest_deadline for p in parts if p.newest_deadline), default=None
            ),
        )

    def tenant_backlog(self, park_attempts: int, *, limit: int, **kwargs: Any) -> TenantBacklogs:
        parts = self._each(lambda s: s.tenant_backlog(park_attempts, limit=limit, **kwargs))
        by_tenant: dict[str, Any] = {}
        for part in parts:
            for t in part.tenants:
                seen = by_tenant.get(t.tenant)
                by_tenant[t.tenant] = (
                    t
                    if seen is None
                    else dataclasses.replace(
                        seen,
                        waiting=seen.waiting + t.waiting,
                        waiting_capped=seen.waiting_capped or t.waiting_capped,
                        overdue=seen.overdue + t.overdue,
                        overdue_capped=seen.overdue_capped or t.overdue_capped,
                        oldest_overdue=min(
                            (x for x in (seen.oldest_overdue, t.oldest_overdue) if x), default=None
                        ),
                        claimed=seen.claimed + t.claimed,
                        parked=seen.parked + t.parked,
                    )
                )
        ranked = sorted(by_tenant.values(), key=lambda t: (-t.overdue, -t.waiting, t.tenant))
        return TenantBacklogs(
            parts[0].now,
            ranked[:limit],
            any(p.tenants_capped for p in parts) or len(ranked) > limit,
        )

    def list_nodes(self, live_s: float, *, include_dead: bool = False) -> list[NodeRecord]:
        """Every node registers in every shard: shard 0's record of each, then any other."""
        seen: dict[str, NodeRecord] = {}
        for nodes in self._each(lambda s: s.list_nodes(live_s, include_dead=include_dead)):
            for node in nodes:
                seen.setdefault(node.node_id, node)
        return list(seen.values())

    # -- bulk actions --------------------------------------------------------------------------

    def bulk_cancel(self, where: MessageFilter, **kwargs: Any) -> BulkBatch:
        return self._bulk(self._each(lambda s: s.bulk_cancel(where, **kwargs)))

    def bulk_reschedule(self, where: MessageFilter, **kwargs: Any) -> BulkBatch:
        return self._bulk(self._each(lambda s: s.bulk_reschedule(where, **kwargs)))

    @staticmethod
    def _bulk(batches: list[BulkBatch]) -> BulkBatch:
        """The shards' batches as one: the next starts after the earliest cursor of a shard not
        done (the others' rows past it no longer match: cancelled, or moved after ``since``).
        Its clock, a reschedule's ``since`` for the next batches, is the earliest of the shards'
        (a row a shard moved is stamped after its own clock: never matched again)."""
        pending = [b.after for b in batches if b.after is not None]
        return BulkBatch(
            sum(b.done for b in batches),
            sum(b.claimed for b in batches),
            min(pending) if pending else None,
            min(b.now for b in batches),
        )

    # -- pauses and limits: written to every shard, read from shard 0 -------------------------

    def pause(self, kind: PauseKind, name: str, paused_by: str) -> Pause:
        return self._each(lambda s: s.pause(kind, name, paused_by))[0]

    def resume(self, kind: PauseKind, name: str) -> Pause | None:
        return self._each(lambda s: s.resume(kind, name))[0]

    def pauses(self) -> list[Pause]:
        return self._named(0, lambda s: s.pauses())

    def set_limit(self, kind: PauseKind, name: str, per_second: int, set_by: str) -> Limit:
        return self._each(lambda s: s.set_limit(kind, name, per_second, set_by))[0]

    def clear_limit(self, kind: PauseKind, name: str) -> Limit | None:
        return self._each(lambda s: s.clear_limit(kind, name))[0]

    def limits(self) -> list[Limit]:
        return self._named(0, lambda s: s.limits())

    # -- the history ---------------------------------------------------------------------------

    def summarize_history(
        self,
        since: datetime,
        until: datetime | None = None,
        *,
        tenant: str | None = None,
        limit: int = 1000,
    ) -> list[HistorySummary]:
        """Counts summed by tenant and outcome; the lateness percentiles cannot be merged
        exactly from the shards' own: p50 is their count-weighted mean, p99 the highest."""
        merged: dict[tuple[str, str], list[HistorySummary]] = {}
        for part in self._each(
            lambda s: s.summarize_history(since, until, tenant=tenant, limit=limit)
        ):
            for summary in part:
                merged.setdefault((summary.tenant, summary.outcome), []).append(summary)
        out = []
        for key in sorted(merged):
            parts = merged[key]
            count = sum(p.count for p in parts)
            p50s = [(p.lateness_p50_ms, p.count) for p in parts if p.lateness_p50_ms is not None]
            p99s = [p.lateness_p99_ms for p in parts if p.lateness_p99_ms is not None]
            out.append(
                dataclasses.replace(
                    parts[0],
                    count=count,
                    lateness_p50_ms=sum(v * n for v, n in p50s) / sum(n for _, n in p50s)
                    if p50s
                    else None,
                    lateness_p99_ms=max(p99s) if p99s else None,
                )
            )
        return out[:limit]

    def count_tenant_history(self, tenant: str, *, limit: int) -> int:
        return min(limit, sum(self._each(lambda s: s.count_tenant_history(tenant, limit=limit))))

    def delete_tenant_history(self, tenant: str, *, batch: int) -> int:
        return sum(self._each(lambda s: s.delete_tenant_history(tenant, batch=batch)))
