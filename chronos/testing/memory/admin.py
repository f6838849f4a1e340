"""The in-memory store's admin, monitoring and leadership statements: a part of
``chronos.testing.InMemoryStore`` (as ``chronos.store.postgres.admin`` is of ``PostgresStore``),
with the
semantics of the named SQL."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from chronos.cluster.leadership import lowest_id
from chronos.protocol import DEFAULT_TENANT
from chronos.store import (
    COUNT_LIMIT,
    DEFAULT_CANCEL_TTL_MS,
    EXACT_COUNT_BELOW,
    LIST_QUERIES,
    Backlog,
    CancelOutcome,
    MessageRecord,
    NodeRecord,
    RequeueOutcome,
    RescheduleOutcome,
    TenantBacklog,
    TenantBacklogs,
)
from chronos.store.filters import listed_bytes
from chronos.store.history import Ending
from chronos.testing.memory.rows import NodeRow, StoredRow, check_uuid


class InMemoryAdmin:
    """Admin, monitoring and leadership statements over ``InMemoryStore``'s rows."""

    _rows: dict[str, StoredRow]
    _nodes: dict[str, NodeRow]
    _tenants: set[str]
    _cancels: dict[str, datetime]
    _lock: threading.RLock
    clock: Callable[[], datetime]

    def _statement(self, name: str) -> datetime:
        raise NotImplementedError  # InMemoryStore's: counts, injects failures, returns now()

    def _cancel_wins(self, row: StoredRow, now: datetime) -> bool:
        raise NotImplementedError  # InMemoryStore's

    def backlog(
        self,
        park_attempts: int,
        *,
        exact_below: int = EXACT_COUNT_BELOW,
        count_limit: int = COUNT_LIMIT,
    ) -> Backlog:
        with self._lock:
            now = self._statement("backlog")
            rows = list(self._rows.values())
            unclaimed = [r for r in rows if r.readied_at is None]
            claimed = [r for r in rows if r.readied_at is not None]
            parked = [r for r in unclaimed if r.parked(park_attempts)]
            overdue = [
                r
                for r in unclaimed
                if r.deadline < now and r.parked_at is None and r.attempts < park_attempts
            ]
            exact = len(rows) < exact_below and len(unclaimed) < exact_below
            deadlines = [r.deadline for r in rows]
            return Backlog(
                now=now,
                estimated_rows=len(rows),
                unclaimed=len(unclaimed) if exact else max(len(rows) - len(claimed), 0),
                unclaimed_exact=exact,
                claimed=len(claimed),
                parked=min(len(parked), count_limit),
                parked_capped=len(parked) >= count_limit,
                overdue=min(len(overdue), count_limit),
                overdue_capped=len(overdue) >= count_limit,
                oldest_overdue=min((r.deadline for r in overdue), default=None),
                oldest_deadline=min(deadlines, default=None),
                newest_deadline=max(deadlines, default=None),
            )

    def tenant_backlog(
        self,
        park_attempts: int,
        *,
        limit: int,
        count_limit: int = COUNT_LIMIT,
        max_tenants: int = 1_000,
    ) -> TenantBacklogs:
        with self._lock:
            now = self._statement("tenant_backlog")
            rows = list(self._rows.values())
            named = sorted(
                {r.tenant for r in rows if r.tenant is not None and _waiting(r, park_attempts)}
            )
            walked = set(named[:max_tenants])
            waiting: dict[str, int] = {}
            overdue: dict[str, list[datetime]] = {}
            claimed: dict[str, int] = {}
            parked: dict[str, int] = {}
            parked_rows = [r for r in rows if r.parked(park_attempts)][:count_limit]
            for r in parked_rows:
                parked[r.tenant or ""] = parked.get(r.tenant or "", 0) + 1
            for r in rows:
                tenant = r.tenant or ""
                if r.readied_at is not None:
                    claimed[tenant] = claimed.get(tenant, 0) + 1
                elif (r.tenant is None or r.tenant in walked) and _waiting(r, park_attempts):
                    waiting[tenant] = waiting.get(tenant, 0) + 1
                    if r.deadline < now:
                        overdue.setdefault(tenant, []).append(r.deadline)
            records = [
                TenantBacklog(
                    tenant=tenant,
                    now=now,
                    waiting=min(waiting.get(tenant, 0), count_limit),
                    waiting_capped=waiting.get(tenant, 0) >= count_limit,
                    overdue=min(len(overdue.get(tenant, [])), count_limit),
                    overdue_capped=len(overdue.get(tenant, [])) >= count_limit,
                    oldest_overdue=min(overdue.get(tenant, []), default=None),
                    claimed=claimed.get(tenant, 0),
                    parked=parked.get(tenant, 0),
                )
                for tenant in {*waiting, *claimed, *parked}
            ]
            records.sort(key=lambda t: (-t.overdue, -t.waiting, t.tenant))
            return TenantBacklogs(
                now=now, tenants=records[:limit], tenants_capped=len(named) >= max_tenants
            )

    @staticmethod
    def _record(row: StoredRow, include_value: bool) -> MessageRecord:
        return MessageRecord(
            id=row.id,
            deadline=row.deadline,
            readied_at=row.readied_at,
            readied_by=row.readied_by,
            attempts=row.attempts,
            last_error=row.last_error,
            target_topic=row.target_topic,
            enqueued_at=row.enqueued_at,
            key=row.key,
            headers=row.headers,
            value_size=None if row.value is None else len(row.value),
            value=row.value if include_value else None,
            parked_at=row.parked_at,
            recurrence=row.recurrence,
            tenant=row.tenant,
            expires_ms=row.expires_ms,
        )

    def get_message(self, message_id: str, *, include_value: bool = False) -> MessageRecord | None:
        with self._lock:
            self._statement("get_message")
            row = self._rows.get(message_id)
            return None if row is None else self._record(row, include_value)

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
        if state not in LIST_QUERIES:
            raise ValueError(f"unknown message state {state!r}")
        with self._lock:
            self._statement(LIST_QUERIES[state])

            def wanted(r: StoredRow) -> bool:
                if state == "waiting" and not (
                    r.readied_at is None and r.parked_at is None and r.attempts < park_attempts
                ):
                    return False
                if state == "parked" and not r.parked(park_attempts):
                    return False
                if state == "claimed" and r.readied_at is None:
                    return False
                if deadline_from is not None and r.deadline < deadline_from:
                    return False
                if deadline_to is not None and r.deadline >= deadline_to:
                    return False
                return after is None or (r.deadline, r.id) > after

            chosen = sorted(
                (r for r in self._rows.values() if wanted(r)), key=lambda r: (r.deadline, r.id)
            )
            page: list[MessageRecord] = []
            running = 0
            for row in chosen[: max(0, limit)]:
                size = listed_bytes(row.key, row.headers)
                if max_bytes is not None and running >= max_bytes:
                    break  # the row that crossed the budget was the last one taken
                running += size
                page.append(dataclasses.replace(self._record(row, False), page_bytes=running))
            return page

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

    def cancel_message(
        self,
        message_id: str,
        cancel_ttl_ms: int = DEFAULT_CANCEL_TTL_MS,
        *,
        by: str | None = None,
    ) -> CancelOutcome:
        with self._lock:
            now = self._statement("cancel_message")
            self._cancels[message_id] = now + timedelta(milliseconds=cancel_ttl_ms)
            row = self._rows.get(message_id)
            if row is None:
                return CancelOutcome.NOT_FOUND
            if row.readied_at is not None:
                row.end_claimed()  # a claimed series: that occurrence is its last
                return CancelOutcome.CLAIMED
            del self._rows[message_id]
            self._ended(row, now, "cancelled", reason="admin", by=by)
            return CancelOutcome.CANCELLED

    def requeue_message(self, message_id: str, park_attempts: int) -> RequeueOutcome:
        with self._lock:
            self._statement("requeue_message")
            row = self._rows.get(message_id)
            if row is None:
                return RequeueOutcome.NOT_FOUND
            if not row.parked(park_attempts):
                return RequeueOutcome.NOT_PARKED
            row.attempts, row.parked_at, row.last_error = 0, None, None
            return RequeueOutcome.REQUEUED

    def reschedule_message(
        self,
        message_id: str,
        park_attempts: int,
        *,
        deadline: datetime | None = None,
        delay_ms: int | None = None,
    ) -> tuple[RescheduleOutcome, MessageRecord | None]:
        if (deadline is None) == (delay_ms is None):
            raise ValueError("give exactly one of deadline and delay_ms")
        with self._lock:
            now = self._statement("reschedule_message")
            row = self._rows.get(message_id)
            if row is None:
                return RescheduleOutcome.NOT_FOUND, None
            if row.readied_at is not None:
                return RescheduleOutcome.CLAIMED, None
            if row.parked(park_attempts):
                return RescheduleOutcome.PARKED, None
            if deadline is None:
                assert delay_ms is not None
                deadline = now + timedelta(milliseconds=delay_ms)
            row.deadline = deadline
            return RescheduleOutcome.RESCHEDULED, self._record(row, False)

    def heartbeat(
        self,
        node_id: str,
        *,
        started_at: datetime | None = None,
        hostname: str | None = None,
        version: str | None = None,
        fired_per_second: float | None = None,
        fired_ago_s: float | None = None,
    ) -> None:
        with self._lock:
            now = self._statement("heartbeat")
            node = check_uuid(node_id, "heartbeat")
            known = self._nodes.get(node)
            self._nodes[node] = NodeRow(
                started_at=known.started_at if known else (started_at or now),
                heartbeat_at=now,
                hostname=hostname,
                version=version,
                fired_per_second=fired_per_second,
                fired_at=None if fired_ago_s is None else now - timedelta(seconds=fired_ago_s),
            )

    def register_node(
        self, node_id: str, live_s: float, *, hostname: str | None, version: str | None
    ) -> datetime | None:
        with self._lock:
            now = self._statement("register_node")
            node = check_uuid(node_id, "register_node")
            known = self._nodes.get(node)
            if known is not None and known.heartbeat_at >= now - timedelta(seconds=live_s):
                return None
            self._nodes[node] = NodeRow(
                started_at=now, heartbeat_at=now, hostname=hostname, version=version
            )
            return now

    def remove_node(self, node_id: str) -> bool:
        with self._lock:
            self._statement("remove_node")
            return self._nodes.pop(check_uuid(node_id, "remove_node"), None) is not None

    def prune_tenants(self, limit: int) -> int:
        with self._lock:
            self._statement("prune_tenants")
            waiting = {
                r.tenant
                for r in self._rows.values()
                if r.readied_at is None and r.parked_at is None
            }
            stale = sorted(t for t in self._tenants if t != DEFAULT_TENANT and t not in waiting)
            for tenant in stale[:limit]:
                self._tenants.discard(tenant)
            return len(stale[:limit])

    def expire_nodes(self, retain_s: float) -> int:
        with self._lock:
            now = self._statement("expire_nodes")
            cutoff = now - timedelta(seconds=retain_s)
            gone = [n for n, row in self._nodes.items() if row.heartbeat_at < cutoff]
            for node in gone:
                del self._nodes[node]
            return len(gone)

    def dead_messages(self) -> tuple[int, bool]:
        """No dead row versions here: a row ended is gone (the leader's vacuum never runs)."""
        with self._lock:
            self._statement("messages_dead_rows")
            return 0, True

    def vacuum_messages(self) -> None:
        with self._lock:
            self._statement("vacuum_messages")

    def list_nodes(self, live_s: float, *, include_dead: bool = False) -> list[NodeRecord]:
        with self._lock:
            now = self._statement("list_nodes")
            claims: dict[str, list[datetime]] = {}
            for r in self._rows.values():
                if r.readied_at is not None and r.readied_by is not None:
                    claims.setdefault(r.readied_by, []).append(r.readied_at)
            records = []
            for node in sorted(set(self._nodes) | set(claims)):
                beat = self._nodes.get(node)
                held = claims.get(node, [])
                live = beat is not None and beat.heartbeat_at > now - timedelta(seconds=live_s)
                if not (live or held or include_dead):
                    continue
                records.append(
                    NodeRecord(
                        node_id=node,
                        live=live,
                        started_at=beat.started_at if beat else None,
                        heartbeat_at=beat.heartbeat_at if beat else None,
                        heartbeat_age_seconds=(
                            (now - beat.heartbeat_at).total_seconds() if beat else None
                        ),
                        hostname=beat.hostname if beat else None,
                        version=beat.version if beat else None,
                        claimed=len(held),
                        oldest_claim_at=min(held, default=None),
                        fired_per_second=beat.fired_per_second if beat else None,
                    )
                )
            return records

    def elect_leader(self, window_ms: int) -> str | None:
        with self._lock:
            now = self._statement("elect_leader")
            cutoff = now - timedelta(milliseconds=window_ms)
            return lowest_id([n for n, row in self._nodes.items() if row.heartbeat_at > cutoff])

    def peers_delivering(self, node_id: str, within_ms: int) -> int:
        with self._lock:
            now = self._statement("peers_delivering")
            me = check_uuid(node_id, "peers_delivering")
            cutoff = now - timedelta(milliseconds=within_ms)
            return sum(
                1
                for n, row in self._nodes.items()
                if n != me and row.fired_at is not None and row.fired_at > cutoff
            )

    def reset_lapsed_claims(
        self, window_ms: int, node_id: str, limit: int
    ) -> list[tuple[str, str]]:
        with self._lock:
            now = self._statement("reset_lapsed_claims")
            me = check_uuid(node_id, "reset_lapsed_claims")
            cutoff = now - timedelta(milliseconds=window_ms)
            lapsed = {n for n, row in self._nodes.items() if row.heartbeat_at < cutoff and n != me}
            taken = [
                r
                for r in self._rows.values()
                if r.readied_at is not None and r.readied_by in lapsed
            ]
            taken.sort(key=lambda r: r.readied_at or now)
            reset: list[tuple[str, str]] = []
            for row in taken[: max(0, limit)]:
                if self._cancel_wins(row, now):
                    continue
                reset.append((row.id, row.readied_by or ""))
                row.readied_at = None
                row.readied_by = None
            return reset


def _waiting(row: StoredRow, park_attempts: int) -> bool:
    """Unclaimed, not parked (the rows of the ready index, less the ones parked by attempts)."""
    return row.readied_at is None and row.parked_at is None and row.attempts < park_attempts
