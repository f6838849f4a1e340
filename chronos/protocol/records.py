"""``parse_record``: a raw input record to a ``ScheduledMessage`` or a ``Rejection``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from chronos.protocol.deadline import format_deadline
from chronos.protocol.fields import (
    key_tenant,
    parse_action,
    parse_cancel,
    parse_deadline_header,
    parse_expires,
    parse_id,
    parse_rule,
    parse_tenant,
    parse_topic,
    storable_name,
)
from chronos.protocol.message import Action, Rejection, ScheduledMessage
from chronos.protocol.names import (
    ACTION_HEADER,
    CHRONOS_HEADERS,
    CRON_HEADER,
    DEADLINE_HEADER,
    EVERY_HEADER,
    EXPIRES_HEADER,
    MESSAGE_ID_HEADER,
    OPTIONAL_HEADERS,
    RECURRENCE_HEADERS,
    TENANT_HEADER,
    TOPIC_HEADER,
    UNTIL_HEADER,
    Headers,
)
from chronos.recurrence import RecurrenceError


def parse_record(
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] | None,
    *,
    now: datetime | None = None,
    max_delay: timedelta | None = None,
    topic_allowed: Callable[[str], bool] | None = None,
    tenant_from_key: str = "",
) -> ScheduledMessage | Rejection:
    """Validate one input record. Never raises on bad input: returns a Rejection instead.
    ``topic_allowed`` decides on a ``chronosTopic`` (None: no topic is allowed);
    ``tenant_from_key`` (non-empty) is the separator ending the key prefix that names the tenant
    of a record without ``chronosTenant``."""
    message_id: bytes | None = None
    deadline_raw: bytes | None = None
    optional: dict[str, bytes | None] = {}
    relayed: Headers = []
    seen_id = seen_deadline = 0
    seen: dict[str, int] = {}
    bad_name: str | None = None
    for name, header_value in headers or ():
        if name == MESSAGE_ID_HEADER:
            seen_id += 1
            message_id = header_value
        elif name == DEADLINE_HEADER:
            seen_deadline += 1
            deadline_raw = header_value
        elif name in CHRONOS_HEADERS:
            seen[name] = seen.get(name, 0) + 1
            optional[name] = header_value
        else:
            relayed.append((name, header_value))
            if not storable_name(name):
                bad_name = name

    if bad_name is not None:
        return Rejection(
            "invalid_header",
            f"header name {bad_name[:64]!r} is not storable (NUL or invalid UTF-8)",
        )
    if seen_id == 0:
        return Rejection("missing_id", f"missing header {MESSAGE_ID_HEADER}")
    if seen_id > 1:
        return Rejection("duplicate_header", f"header {MESSAGE_ID_HEADER} appears {seen_id} times")
    if seen and max(seen.values()) > 1:
        for header in OPTIONAL_HEADERS:
            if seen.get(header, 0) > 1:
                return Rejection(
                    "duplicate_header", f"header {header} appears {seen[header]} times"
                )
    action = parse_action(optional[ACTION_HEADER]) if ACTION_HEADER in seen else Action.SCHEDULE
    if isinstance(action, Rejection):
        return action
    if action is Action.CANCEL:
        return parse_cancel(message_id, key, now)
    recurring = bool(seen) and (EVERY_HEADER in seen or CRON_HEADER in seen)
    if seen_deadline == 0 and not recurring:
        return Rejection("missing_deadline", f"missing header {DEADLINE_HEADER}")
    if seen_deadline > 1:
        return Rejection(
            "duplicate_header", f"header {DEADLINE_HEADER} appears {seen_deadline} times"
        )
    id_text = parse_id(message_id)
    if isinstance(id_text, Rejection):
        return id_text
    target_topic = (
        parse_topic(optional[TOPIC_HEADER], topic_allowed) if TOPIC_HEADER in seen else None
    )
    if isinstance(target_topic, Rejection):
        return target_topic
    tenant = (
        parse_tenant(optional[TENANT_HEADER])
        if TENANT_HEADER in seen
        else key_tenant(key, tenant_from_key)
    )
    if isinstance(tenant, Rejection):
        return tenant
    deadline: datetime | None = None
    if seen_deadline:
        deadline_or_rejection = parse_deadline_header(deadline_raw)
        if isinstance(deadline_or_rejection, Rejection):
            return deadline_or_rejection
        deadline = deadline_or_rejection
    rule = parse_rule(optional) if seen and not seen.keys().isdisjoint(RECURRENCE_HEADERS) else None
    if isinstance(rule, Rejection):
        return rule
    recurrence: str | None = None
    if rule is not None:
        arrival = now or datetime.now(UTC)
        try:
            deadline = rule.first(deadline or arrival, exact=deadline is not None)
        except (RecurrenceError, ValueError, OverflowError, StopIteration) as exc:
            return Rejection("invalid_recurrence", f"no occurrence can be computed: {exc}")
        if rule.until is not None and deadline > rule.until:
            return Rejection(
                "invalid_recurrence",
                f"{UNTIL_HEADER} {format_deadline(rule.until)} is before the first occurrence "
                f"{format_deadline(deadline)}",
            )
        recurrence = rule.encode()
    assert deadline is not None  # a deadline was given, or the rule computed the first
    expires_ms = (
        parse_expires(optional[EXPIRES_HEADER], deadline, rule is not None)
        if EXPIRES_HEADER in seen
        else None
    )
    if isinstance(expires_ms, Rejection):
        return expires_ms
    if max_delay is not None and now is not None and deadline - now > max_delay:
        return Rejection(
            "max_delay_exceeded",
            f"{DEADLINE_HEADER} {format_deadline(deadline)} is more than "
            f"{int(max_delay.total_seconds() * 1000)} ms ahead (max delay)",
        )
    return ScheduledMessage(
        id_text,
        deadline,
        key,
        value,
        relayed,
        action,
        target_topic,
        tenant,
        recurrence,
        expires_ms,
    )
