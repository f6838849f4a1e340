"""What the admin API answers: messages (listed, and a message's whole record with a value
preview and a series' next occurrences), stats, tenants and nodes as JSON-ready dicts. Keys,
values and header values are bytes: base64 always, plus a text rendering when printable."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from chronos.admin.params import format_timestamp
from chronos.cluster.leadership import lowest_id
from chronos.protocol import b64
from chronos.recurrence import Rule, decode
from chronos.store import (
    COUNT_LIMIT,
    EXACT_COUNT_BELOW,
    Backlog,
    MessageRecord,
    NodeRecord,
    TenantBacklog,
    TenantBacklogs,
)

TENANT_WALK_LIMIT = 1_000  # tenants with waiting rows GET /admin/v1/tenants looks at, by name
VALUE_PREVIEW_BYTES = 1024  # of a value, shown in a message's whole record
NEXT_SHOWN = 5  # a series' next occurrences shown in its whole record


def message_json(record: MessageRecord, parked_at: int, *, include_value: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": record.id,
        "state": record.state(parked_at),
        "deadline": format_timestamp(record.deadline),
        "readied_at": format_timestamp(record.readied_at),
        "claimed_by": record.readied_by,
        "attempts": record.attempts,
        "last_error": record.last_error,
        "target_topic": record.target_topic,
        "tenant": record.tenant,
        "expires_ms": record.expires_ms,
        "enqueued_at": format_timestamp(record.enqueued_at),
        "key": b64(record.key),
        "key_text": printable(record.key),
        "headers": [
            {"name": name, "value": b64(value), "text": printable(value)}
            for name, value in record.headers
        ],
        "value_size": record.value_size,
        "recurrence": recurrence_json(record.recurrence),
    }
    if include_value:
        body["value"] = b64(record.value)
    return body


def record_json(
    record: MessageRecord, parked_at: int, *, include_value: bool, occurrences: int = NEXT_SHOWN
) -> dict[str, Any]:
    """A message's whole record (GET one): the listed fields, a preview of its value (text when
    it is printable UTF-8, else hex; at most VALUE_PREVIEW_BYTES) and, for a series, its next
    occurrences from the deadline on."""
    body = message_json(record, parked_at, include_value=include_value)
    body["value_preview"] = value_preview(record.value) if record.value_size is not None else None
    if body["recurrence"] is not None and record.recurrence is not None:
        body["recurrence"]["next"] = next_occurrences(
            record.recurrence, record.deadline, occurrences
        )
    return body


def printable(raw: bytes | None) -> str | None:
    """``raw`` as text when it is UTF-8 with no control character (tab aside), else None: a
    key or header shown to people as it reads, never with bytes that move a terminal."""
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any((ord(c) < 32 and c != "\t") or 127 <= ord(c) < 160 for c in text):
        return None
    return text


def value_preview(value: bytes | None) -> dict[str, Any] | None:
    """The first VALUE_PREVIEW_BYTES of a value: ``{"text": ...}`` when printable (a UTF-8
    character cut at the end is dropped), else ``{"hex": ...}``; ``truncated`` says if more."""
    if value is None:
        return None
    head = value[:VALUE_PREVIEW_BYTES]
    truncated = len(value) > len(head)
    text = printable(head)
    if text is None and truncated:
        for cut in range(1, 4):  # a multi-byte character split by the cut
            text = printable(head[:-cut])
            if text is not None:
                break
    if text is not None:
        return {"text": text, "truncated": truncated}
    return {"hex": head.hex(), "truncated": truncated}


def next_occurrences(stored: str, deadline: datetime, count: int) -> list[str]:
    """The series' next ``count`` occurrences from ``deadline`` (its next one) on; fewer when
    it ends (until), none when its rule cannot be read."""
    try:
        rule = decode(stored)
    except (ValueError, KeyError, TypeError):
        return []
    shown: list[str] = []
    at: datetime | None = deadline
    while at is not None and len(shown) < count:
        shown.append(format_timestamp(at) or "")
        try:
            at = rule.after(at)
        except (ValueError, OverflowError):
            break
    return shown


def recurrence_json(stored: str | None) -> dict[str, Any] | None:
    """A series' rule as the API shows it (None: a one-shot message); its next occurrence is
    the message's deadline."""
    if stored is None:
        return None
    try:
        rule = decode(stored)
    except (ValueError, KeyError, TypeError):
        rule = Rule(cron=f"unreadable: {stored[:200]}")  # shown as it is, never fired as a rule
    return {
        "rule": rule.describe(),
        "every_ms": rule.every_ms,
        "cron": rule.cron,
        "time_zone": rule.zone if rule.cron is not None else None,
        "until": format_timestamp(rule.until),
        "missed": rule.missed.value,
    }


def stats_json(backlog: Backlog, parked_at: int) -> dict[str, Any]:
    return {
        "waiting": backlog.waiting,
        "waiting_exact": backlog.unclaimed_exact and not backlog.parked_capped,
        "claimed": backlog.claimed,
        "parked": backlog.parked,
        "parked_exact": not backlog.parked_capped,
        "overdue": backlog.overdue,
        "overdue_exact": not backlog.overdue_capped,
        "oldest_overdue_age_seconds": backlog.oldest_overdue_seconds,
        "oldest_deadline": format_timestamp(backlog.oldest_deadline),
        "newest_deadline": format_timestamp(backlog.newest_deadline),
        "estimated_rows": backlog.estimated_rows,
        "exact_count_below": EXACT_COUNT_BELOW,
        "count_limit": COUNT_LIMIT,
        "park_attempts": parked_at,
        "database_time": format_timestamp(backlog.now),
    }


def tenant_json(t: TenantBacklog) -> dict[str, Any]:
    return {
        "tenant": t.tenant,
        "waiting": t.waiting,
        "waiting_exact": not t.waiting_capped,
        "overdue": t.overdue,
        "overdue_exact": not t.overdue_capped,
        "oldest_overdue_age_seconds": t.oldest_overdue_seconds,
        "claimed": t.claimed,
        "parked": t.parked,
    }


def tenants_json(backlogs: TenantBacklogs, limit: int) -> dict[str, Any]:
    return {
        "tenants": [tenant_json(t) for t in backlogs.tenants],
        "limit": limit,
        "tenants_complete": not backlogs.tenants_capped,
        "max_tenants": TENANT_WALK_LIMIT,
        "count_limit": COUNT_LIMIT,
        "database_time": format_timestamp(backlogs.now),
    }


def leader_of(nodes: list[NodeRecord]) -> str | None:
    """The lowest node id among live nodes (uuid order), or None when no node is live: the node
    the election (``chronos.cluster.leadership``) makes the leader."""
    return lowest_id([n.node_id for n in nodes if n.live])


def node_json(node: NodeRecord, leader: str | None, this_node: str) -> dict[str, Any]:
    return {
        "node_id": node.node_id,
        "live": node.live,
        "leader": node.node_id == leader,
        "this_node": node.node_id == this_node,
        "hostname": node.hostname,
        "version": node.version,
        "started_at": format_timestamp(node.started_at),
        "heartbeat_at": format_timestamp(node.heartbeat_at),
        "heartbeat_age_seconds": node.heartbeat_age_seconds,
        "claimed": node.claimed,
        "oldest_claim_at": format_timestamp(node.oldest_claim_at),
        "fired_per_second": node.fired_per_second if node.live else None,
    }


def cluster_fire_rate(nodes: list[NodeRecord]) -> float:
    """The cluster's fire rate: the sum of the live nodes' own (a node reporting none adds 0)."""
    return sum((n.fired_per_second or 0.0 for n in nodes if n.live), 0.0)
