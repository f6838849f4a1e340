"""The audit trail's events: one JSON object per outcome of a message (fired, cancelled,
rescheduled, requeued, expired, dead-lettered) and per operator action, as
``CHRONOS_AUDIT_TOPIC`` receives them (written by ``chronos.kafka.audit``).

The schema is ``audit.schema.json`` beside this module (JSON Schema 2020-12); every event has
``version`` (``SCHEMA_VERSION``), ``event``, ``at`` (RFC 3339 UTC, ms) and ``node``. A new field
is added without a version change; a field removed or changed in meaning bumps the version.
The operator events are ``bulk`` (a bulk action of the admin API) and flow control's ``paused``,
``resumed`` and ``limited`` (a limit set, or removed: ``details.per_second`` null), written by the
admin API's endpoints (``chronos.admin.flow.api``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

SCHEMA_VERSION = 1

FIRED = "fired"
CANCELLED = "cancelled"
RESCHEDULED = "rescheduled"
REQUEUED = "requeued"
EXPIRED = "expired"
DEAD_LETTERED = "dead_lettered"
PAUSED = "paused"  # a tenant or topic paused through the admin API
RESUMED = "resumed"  # ... resumed
LIMITED = "limited"  # ... rate-limited (details.per_second; null: the limit removed)
BULK = "bulk"  # a bulk action of the admin API

VIA_KAFKA = "kafka"  # a chronosAction record on the input topic
VIA_ADMIN_API = "admin_api"

Event = dict[str, Any]


def instant(seconds: float) -> str:
    """An instant as the events write it: RFC 3339, UTC, milliseconds."""
    text = datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def _position(topic: str, partition: int, offset: int) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "offset": offset}


def _base(event: str, node: str, at: float, tenant: str | None = None) -> Event:
    record: Event = {"version": SCHEMA_VERSION, "event": event, "at": instant(at), "node": node}
    if tenant:
        record["tenant"] = tenant
    return record


def fired(
    node: str,
    message_id: str,
    tenant: str,
    deadline: float,
    lateness: float,
    topic: str,
    partition: int,
    offset: int,
) -> Event:
    """A message delivered to its target topic. ``fired_at`` is the deadline plus the lateness
    (both on the database clock, as the timers are)."""
    fired_at = deadline + lateness
    record = _base(FIRED, node, fired_at, tenant)
    record.update(
        id=message_id,
        deadline=instant(deadline),
        fired_at=instant(fired_at),
        lateness_ms=round(lateness * 1000, 3),
        output=_position(topic, partition, offset),
    )
    return record


def dead_lettered(
    node: str,
    message_id: str,
    tenant: str,
    deadline: float,
    at: float,
    code: str,
    reason: str,
    target: tuple[str, int, int] | None,
) -> Event:
    """A message set aside. ``code`` is its dead letter's ``chronosDeadLetterCode``; ``target``
    where the dead letter went (None: dropped, ``CHRONOS_EXPIRED_ACTION=drop`` or no topic).
    An expired message is the ``expired`` event, any other the ``dead_lettered`` one."""
    record = _base(EXPIRED if code == "expired" else DEAD_LETTERED, node, at, tenant)
    record.update(id=message_id, deadline=instant(deadline), code=code, reason=reason)
    record["dead_letter"] = None if target is None else _position(*target)
    return record


def action(
    event: str,
    node: str,
    message_id: str,
    at: float,
    *,
    via: str,
    by: str,
    tenant: str = "",
    deadline: float | None = None,
    claimed: bool = False,
) -> Event:
    """A cancel, reschedule or requeue applied to a waiting (or parked) message, by a
    chronosAction record (``via`` kafka, ``by`` the record's topic/partition/offset) or through
    the admin API (``by`` the caller's name). ``deadline``: a reschedule's new deadline;
    ``claimed``: a cancel of a claimed message (its firing in flight is not stopped, nothing
    follows it)."""
    record = _base(event, node, at, tenant)
    record.update(id=message_id, via=via, by=by)
    if deadline is not None:
        record["deadline"] = instant(deadline)
    if claimed:
        record["claimed"] = True
    return record


def operator(
    event: str,
    node: str,
    at: float,
    *,
    by: str,
    target: dict[str, Any],
    count: int | None = None,
    details: dict[str, Any] | None = None,
) -> Event:
    """A bulk action of the admin API, or a pause, resume or rate limit — who, on what (a
    tenant, a topic or a bulk action's filter), and how many messages."""
    record = _base(event, node, at)
    record.update(by=by, target=target)
    if count is not None:
        record["count"] = count
    if details:
        record["details"] = details
    return record


def encode(event: Event) -> bytes:
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()


@cache
def schema() -> dict[str, Any]:
    """The JSON Schema of the events (``audit.schema.json``)."""
    text = resources.files("chronos.observability").joinpath("audit.schema.json").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded
