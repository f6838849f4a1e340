"""What the admin API answers about ended messages: a history record as JSON, the one line that
says how a message ended ("fired 2026-11-28T10:00:00.003Z to orders[3]@18112, 3 ms after its
deadline, by node ..."), and a summary by tenant and outcome."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from chronos.admin.messages.views import printable
from chronos.admin.params import format_timestamp
from chronos.protocol import b64
from chronos.store import OUTCOMES, EndedRecord, HistorySummary
from chronos.store.history import CANCELLED, DEAD_LETTERED, EXPIRED, FIRED, REPLACED


def instant(value: Any) -> str | None:
    """A timestamp to the millisecond, UTC, ``Z``: as people read one."""
    text = format_timestamp(value)
    if text is None:
        return None
    head, dot, rest = text.partition(".")
    return f"{head}.{rest[:3]}Z" if dot else text.replace("Z", ".000Z")


def _where(record: EndedRecord) -> str:
    if record.topic is None:
        return "nowhere (dropped)"
    if record.partition is None or record.offset is None or record.partition < 0:
        return record.topic
    return f"{record.topic}[{record.partition}]@{record.offset}"


def _late(ms: int | None) -> str:
    if ms is None:
        return ""
    if ms < 0:
        return f", {-ms} ms before its deadline"
    return f", {ms} ms after its deadline"


def describe(record: EndedRecord) -> str:
    """How the message ended, in one line."""
    node = f", by node {record.node}" if record.node else ""
    if record.outcome == FIRED:
        fired_at = record.deadline + timedelta(milliseconds=record.lateness_ms or 0)
        text = f"fired {instant(fired_at)} to {_where(record)}{_late(record.lateness_ms)}{node}"
        if record.attempt and record.attempt > 1:
            text += f" (attempt {record.attempt})"
    elif record.outcome == EXPIRED:
        to = f"dead-lettered to {_where(record)}" if record.topic else "dropped"
        text = f"expired {instant(record.ended_at)}{_late(record.lateness_ms)}: {to}{node}"
    elif record.outcome == DEAD_LETTERED:
        why = f" ({record.reason})" if record.reason else ""
        text = f"dead-lettered {instant(record.ended_at)} to {_where(record)}{why}{node}"
    elif record.outcome == CANCELLED:
        by = f" by {record.ended_by}" if record.ended_by else ""
        how = f" ({record.reason})" if record.reason else ""
        text = f"cancelled {instant(record.ended_at)}{by}{how}"
    elif record.outcome == REPLACED:
        text = f"replaced {instant(record.ended_at)} by a reschedule"
    else:
        text = f"{record.outcome} {instant(record.ended_at)}"
    if record.recurring:
        following = instant(record.next_deadline)
        text += f"; next occurrence {following}" if following else "; the series ended"
    return text


def ended_json(record: EndedRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "state": record.outcome,
        "ended": True,
        "tenant": record.tenant,
        "deadline": format_timestamp(record.deadline),
        "ended_at": format_timestamp(record.ended_at),
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "lateness_ms": record.lateness_ms,
        "node": record.node,
        "attempt": record.attempt,
        "reason": record.reason,
        "ended_by": record.ended_by,
        "next_deadline": format_timestamp(record.next_deadline),
        "recurring": record.recurring,
        "key": b64(record.key),
        "key_text": printable(record.key),
        "summary": describe(record),
    }


def ended_message_json(records: list[EndedRecord]) -> dict[str, Any]:
    """A message that is no longer scheduled (GET one): its latest end, and every record kept
    (newest first: a message fired twice shows both fires; a series, its occurrences)."""
    return {**ended_json(records[0]), "history": [ended_json(r) for r in records]}


def summary_json(
    summaries: list[HistorySummary], since: Any, until: Any, complete: bool
) -> dict[str, Any]:
    """Per tenant: how many ended of each outcome, and the fired ones' lateness p50/p99."""
    tenants: dict[str, dict[str, Any]] = {}
    for s in summaries:
        row = tenants.setdefault(
            s.tenant,
            {"tenant": s.tenant, **{o.replace("-", "_"): 0 for o in OUTCOMES}},
        )
        row[s.outcome.replace("-", "_")] = s.count
        if s.outcome == FIRED:
            row["lateness_p50_ms"] = s.lateness_p50_ms
            row["lateness_p99_ms"] = s.lateness_p99_ms
    for row in tenants.values():
        row.setdefault("lateness_p50_ms", None)
        row.setdefault("lateness_p99_ms", None)
    return {
        "since": format_timestamp(since),
        "until": format_timestamp(until),
        "tenants": list(tenants.values()),
        "complete": complete,
    }
