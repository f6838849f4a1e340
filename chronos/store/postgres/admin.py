"""Admin and monitoring on the Postgres store: the records the admin API and the backlog gauges
show, and the statements behind them (message lookup, listing, cancel, requeue, reschedule;
backlog statistics; node heartbeats). Off the hot path: ``PostgresStore`` inherits these
statements, the firing and intake loops never call them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from chronos.protocol import decode_headers
from chronos.store.backlog import Backlog, TenantBacklog, TenantBacklogs
from chronos.store.types import (
    COUNT_LIMIT,
    DEFAULT_CANCEL_TTL_MS,
    EXACT_COUNT_BELOW,
    LIST_QUERIES,
    UNBOUNDED_BYTES,
    CancelOutcome,
    MessageRecord,
    NodeRecord,
    RequeueOutcome,
    RescheduleOutcome,
)


class AdminQueries:
    """The admin and monitoring statements of :class:`chronos.store.PostgresStore`."""

    def _execute(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError  # PostgresStore runs the named statement

    def backlog(
        self,
        park_attempts: int,
        *,
        exact_below: int = EXACT_COUNT_BELOW,
        count_limit: int = COUNT_LIMIT,
    ) -> Backlog:
        """Backlog statistics in one statement that never scans the table (indexes, estimates)."""
        r = self._execute(
            "backlog",
            {
                "park_attempts": park_attempts,
                "exact_below": exact_below,
                "count_limit": count_limit,
            },
        )[0]
        claimed = int(r["claimed"])
        bounded = r["unclaimed_bounded"]
        estimated = None if r["estimated_rows"] is None else int(r["estimated_rows"])
        if bounded is not None and bounded < exact_below:
            unclaimed, exact = int(bounded), True
        else:
            unclaimed, exact = max((estimated or 0) - claimed, int(bounded or 0)), False
        parked, overdue = int(r["parked_bounded"]), int(r["overdue_bounded"])
        return Backlog(
            now=r["now"],
            estimated_rows=estimated,
            unclaimed=unclaimed,
            unclaimed_exact=exact,
            claimed=claimed,
            parked=parked,
            parked_capped=parked >= count_limit,
            overdue=overdue,
            overdue_capped=overdue >= count_limit,
            oldest_overdue=r["oldest_overdue"],
            oldest_deadline=r["oldest_deadline"],
            newest_deadline=r["newest_deadline"],
        )

    def tenant_backlog(
        self,
        park_attempts: int,
        *,
        limit: int,
        count_limit: int = COUNT_LIMIT,
        max_tenants: int = 1_000,
    ) -> TenantBacklogs:
        """The ``limit`` tenants with the most overdue rows, in one bounded statement: at most
        ``max_tenants`` tenants with waiting rows (in name order) and ``count_limit`` rows of
        each are read."""
        rows = self._execute(
            "tenant_backlog",
            {
                "park_attempts": park_attempts,
                "limit": limit,
                "count_limit": count_limit,
                "max_tenants": max_tenants,
            },
        )
        if not rows:
            return TenantBacklogs(
                now=self._execute("ping", {})[0]["now"], tenants=[], tenants_capped=False
            )
        tenants = [
            TenantBacklog(
                tenant=r["tenant"],
                now=r["now"],
                waiting=int(r["waiting"]),
                waiting_capped=int(r["waiting"]) >= count_limit,
                overdue=int(r["overdue"]),
                overdue_capped=int(r["overdue"]) >= count_limit,
                oldest_overdue=r["oldest_overdue"],
                claimed=int(r["claimed"]),
                parked=int(r["parked"]),
            )
            for r in rows
        ]
        return TenantBacklogs(
            now=rows[0]["now"],
            tenants=tenants,
            tenants_capped=int(rows[0]["tenants_walked"]) >= max_tenants,
        )

    def get_message(self, message_id: str, *, include_value: bool = False) -> MessageRecord | None:
        rows = self._execute("get_message", {"id": message_id, "include_value": include_value})
        return message_record(rows[0]) if rows else None

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
        """See ``Store.list_messages``."""
        if state not in LIST_QUERIES:
            raise ValueError(f"unknown message state {state!r}")
        rows = self._execute(
            LIST_QUERIES[state],
            {
                "park_attempts": park_attempts,
                "limit": limit,
                "deadline_from": deadline_from,
                "deadline_to": deadline_to,
                "after_deadline": after[0] if after else None,
                "after_id": after[1] if after else None,
                "max_bytes": UNBOUNDED_BYTES if max_bytes is None else max_bytes,
            },
        )
        return [message_record(r) for r in rows]

    def _recording_rows(
        self, name: str, params: dict[str, Any], records: int
    ) -> list[dict[str, Any]]:
        raise NotImplementedError  # HistoryQueries: the statement, its history record too

    def cancel_message(
        self,
        message_id: str,
        cancel_ttl_ms: int = DEFAULT_CANCEL_TTL_MS,
        *,
        by: str | None = None,
    ) -> CancelOutcome:
        rows = self._recording_rows(
            "cancel_message",
            {"id": message_id, "cancel_ttl_ms": cancel_ttl_ms, "by": by},
            records=1,
        )
        if not rows:
            return CancelOutcome.NOT_FOUND
        return CancelOutcome.CANCELLED if rows[0]["deleted"] else CancelOutcome.CLAIMED

    def requeue_message(self, message_id: str, park_attempts: int) -> RequeueOutcome:
        """Give a parked message a fresh start (attempts, parked_at, last_error reset)."""
        rows = self._execute("requeue_message", {"id": message_id, "park_attempts": park_attempts})
        if not rows:
            return RequeueOutcome.NOT_FOUND
        return RequeueOutcome.REQUEUED if rows[0]["requeued"] else RequeueOutcome.NOT_PARKED

    def reschedule_message(
        self,
        message_id: str,
        park_attempts: int,
        *,
        deadline: datetime | None = None,
        delay_ms: int | None = None,
    ) -> tuple[RescheduleOutcome, MessageRecord | None]:
        """Move a waiting message to ``deadline``, or to now + ``delay_ms`` on the database
        clock (exactly one); its key, value and headers stay. Claimed and parked messages are
        left alone. The record (without its value) comes back when it was rescheduled."""
        if (deadline is None) == (delay_ms is None):
            raise ValueError("give exactly one of deadline and delay_ms")
        rows = self._execute(
            "reschedule_message",
            {
                "id": message_id,
                "park_attempts": park_attempts,
                "deadline": deadline,
                "delay_ms": delay_ms,
            },
        )
        if not rows:
            return RescheduleOutcome.NOT_FOUND, None
        r = rows[0]
        if r["id"] is not None:
            return RescheduleOutcome.RESCHEDULED, message_record(r)
        if r["claimed"]:
            return RescheduleOutcome.CLAIMED, None
        return RescheduleOutcome.PARKED, None

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
        self._execute(
            "heartbeat",
            {
                "node_id": node_id,
                "started_at": started_at,
                "hostname": hostname,
                "version": version,
                "fired_per_second": fired_per_second,
                "fired_ago_s": fired_ago_s,
            },
        )

    def register_node(
        self, node_id: str, live_s: float, *, hostname: str | None, version: str | None
    ) -> datetime | None:
        """Take ``node_id`` for this process unless a live node holds it; returns the start
        of this process on the database clock (the fence of its claims), None if taken."""
        rows = self._execute(
            "register_node",
            {"node_id": node_id, "live_s": live_s, "hostname": hostname, "version": version},
        )
        return rows[0]["started_at"] if rows else None

    def shard_record(self) -> tuple[int, int, str] | None:
        """The shard this database is, of how many shards, and their map (``chronos_shard``);
        None where none was recorded (a one-shard deployment, or before schema revision 0018)."""
        if not self._execute("shard_table", {})[0]["present"]:
            return None
        rows = self._execute("shard_record", {})
        return (rows[0]["shard"], rows[0]["shards"], rows[0]["map"]) if rows else None

    def remove_node(self, node_id: str) -> bool:
        return bool(self._execute("remove_node", {"node_id": node_id}))

    def expire_nodes(self, retain_s: float) -> int:
        return len(self._execute("expire_nodes", {"retain_s": retain_s}))

    def prune_tenants(self, limit: int) -> int:
        pruned = len(self._execute("prune_tenants", {"limit": limit}))
        if pruned:
            self._forget_known_tenants()
        return pruned

    def _forget_known_tenants(self) -> None:
        """The tenants this store remembers having written (``PostgresStore``) are written
        again: one of them may have just been pruned."""

    def list_nodes(self, live_s: float, *, include_dead: bool = False) -> list[NodeRecord]:
        rows = self._execute("list_nodes", {"live_s": live_s, "include_dead": include_dead})
        return [
            NodeRecord(
                node_id=r["node_id"],
                live=r["live"],
                started_at=r["started_at"],
                heartbeat_at=r["heartbeat_at"],
                heartbeat_age_seconds=r["heartbeat_age_seconds"],
                hostname=r["hostname"],
                version=r["version"],
                claimed=int(r["claimed"]),
                oldest_claim_at=r["oldest_claim_at"],
                fired_per_second=r["fired_per_second"],
            )
            for r in rows
        ]


def _bytes(value: bytes | memoryview | None) -> bytes | None:
    return None if value is None else bytes(value)


def message_record(r: dict[str, Any]) -> MessageRecord:
    return MessageRecord(
        id=r["id"],
        deadline=r["deadline"],
        readied_at=r["readied_at"],
        readied_by=r["readied_by"],
        attempts=r["attempts"],
        last_error=r["last_error"],
        target_topic=r["target_topic"],
        enqueued_at=r["enqueued_at"],
        key=_bytes(r["message_key"]),
        headers=decode_headers(r["message_headers"]),
        value_size=r["value_size"],
        value=_bytes(r["message_value"]),
        parked_at=r["parked_at"],
        recurrence=r["recurrence"],
        page_bytes=int(r.get("page_bytes") or 0),
        tenant=r.get("tenant"),
        expires_ms=r.get("expires_ms"),
    )
