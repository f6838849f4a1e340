"""Parsing each Chronos header of an input record on its own: the id, action, target topic,
tenant, recurrence rule and expiry. Each returns its value or a ``Rejection``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from fnmatch import fnmatchcase

from chronos.protocol.deadline import DeadlineError, format_deadline, parse_deadline
from chronos.protocol.message import Action, Rejection, ScheduledMessage
from chronos.protocol.names import (
    ACTION_HEADER,
    CRON_HEADER,
    DEADLINE_HEADER,
    DEFAULT_TENANT,
    EVERY_HEADER,
    EXPIRES_HEADER,
    MAX_ID_LENGTH,
    MAX_TENANT_LENGTH,
    MESSAGE_ID_HEADER,
    MISSED_HEADER,
    RECURRENCE_HEADERS,
    TENANT_HEADER,
    TIME_ZONE_HEADER,
    TOPIC_HEADER,
    UNTIL_HEADER,
)
from chronos.recurrence import RecurrenceError, Rule, format_duration, make_rule, parse_duration_ms


def topic_policy(
    output_topic: str, allowed_patterns: str, refused: Iterable[str] = ()
) -> Callable[[str], bool]:
    """Whether a ``chronosTopic`` may be fired to: the output topic always, any other topic only
    if it matches one of the comma-separated glob patterns (case-sensitive; empty: none) and is
    not one of ``refused`` (the input, dead-letter and audit topics: a message fired there would
    be consumed again, read as a dead letter or forge an audit event) — whatever the patterns
    say."""
    patterns = [p.strip() for p in allowed_patterns.split(",") if p.strip()]
    never = {t for t in refused if t and t != output_topic}

    def allowed(topic: str) -> bool:
        if topic == output_topic:
            return True
        return topic not in never and any(fnmatchcase(topic, p) for p in patterns)

    return allowed


def _is_topic_name(name: str) -> bool:
    """A name Kafka accepts for a topic: 1-249 of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    return (
        0 < len(name) <= 249
        and name not in (".", "..")
        and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    )


def parse_deadline_header(raw: bytes | None) -> datetime | Rejection:
    if raw is None or len(raw) == 0:
        return Rejection("invalid_deadline", f"header {DEADLINE_HEADER} is empty")
    if len(raw) > 64:
        return Rejection(
            "invalid_deadline", f"header {DEADLINE_HEADER} is too long ({len(raw)} bytes)"
        )
    try:
        return parse_deadline(raw.decode("ascii"))
    except UnicodeDecodeError:
        return Rejection("invalid_deadline", f"header {DEADLINE_HEADER} is not ASCII")
    except DeadlineError as exc:
        return Rejection("invalid_deadline", str(exc))


def _header_text(raw: bytes | None, header: str, code: str) -> str | Rejection:
    if raw is None or len(raw) == 0:
        return Rejection(code, f"header {header} is empty")
    if len(raw) > 256:
        return Rejection(code, f"header {header} is too long ({len(raw)} bytes)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return Rejection(code, f"header {header} is not valid UTF-8")


def parse_rule(optional: dict[str, bytes | None]) -> Rule | Rejection | None:
    """The series the recurrence headers describe (None: none of them is present)."""
    texts: dict[str, str | None] = {}
    for header in RECURRENCE_HEADERS:
        if header not in optional:
            texts[header] = None
            continue
        text = _header_text(optional[header], header, "invalid_recurrence")
        if isinstance(text, Rejection):
            return text
        texts[header] = text
    until: datetime | None = None
    if texts[UNTIL_HEADER] is not None:
        try:
            until = parse_deadline(texts[UNTIL_HEADER] or "")
        except DeadlineError as exc:
            return Rejection("invalid_recurrence", str(exc).replace(DEADLINE_HEADER, UNTIL_HEADER))
    try:
        return make_rule(
            texts[EVERY_HEADER],
            texts[CRON_HEADER],
            texts[TIME_ZONE_HEADER],
            until,
            texts[MISSED_HEADER],
        )
    except RecurrenceError as exc:
        return Rejection("invalid_recurrence", str(exc))


MAX_EXPIRES_MS = 2**31 - 1
"""The longest ``chronosExpires`` (24 days 20 h 31 min): what the stored column holds."""


def parse_expires(raw: bytes | None, deadline: datetime, recurring: bool) -> int | Rejection:
    """``chronosExpires`` as the milliseconds an occurrence may fire after its deadline: a
    duration (``PT30S``), or, for a one-shot message, an instant after its deadline; at most
    ``MAX_EXPIRES_MS``."""
    expires = _expires_ms(raw, deadline, recurring)
    if isinstance(expires, int) and expires > MAX_EXPIRES_MS:
        return Rejection(
            "invalid_expires",
            f"header {EXPIRES_HEADER} allows a message to fire at most "
            f"{format_duration(MAX_EXPIRES_MS)} (about 24.8 days) after its deadline, not "
            f"{format_duration(expires)}",
        )
    return expires


def _expires_ms(raw: bytes | None, deadline: datetime, recurring: bool) -> int | Rejection:
    text = _header_text(raw, EXPIRES_HEADER, "invalid_expires")
    if isinstance(text, Rejection):
        return text
    if text.strip().upper().startswith("P"):
        try:
            return parse_duration_ms(text, EXPIRES_HEADER)
        except RecurrenceError as exc:
            return Rejection("invalid_expires", str(exc))
    if recurring:
        return Rejection(
            "invalid_expires",
            f"header {EXPIRES_HEADER} of a recurring message is a duration (like PT30S): "
            "how late each occurrence may fire",
        )
    try:
        instant = parse_deadline(text)
    except DeadlineError as exc:
        return Rejection(
            "invalid_expires",
            f"header {EXPIRES_HEADER} {text[:64]!r} is neither an ISO-8601 instant nor a "
            f"duration ({exc})",
        )
    if instant <= deadline:
        return Rejection(
            "invalid_expires",
            f"header {EXPIRES_HEADER} {format_deadline(instant)} is not after "
            f"{DEADLINE_HEADER} {format_deadline(deadline)}",
        )
    return (instant - deadline) // timedelta(milliseconds=1)


def parse_tenant(raw: bytes | None) -> str | Rejection:
    if raw is None or len(raw) == 0:
        return Rejection("invalid_tenant", f"header {TENANT_HEADER} is empty")
    try:
        tenant = raw.decode("utf-8")
    except UnicodeDecodeError:
        return Rejection("invalid_tenant", f"header {TENANT_HEADER} is not valid UTF-8")
    if len(tenant) > MAX_TENANT_LENGTH:
        return Rejection(
            "invalid_tenant",
            f"header {TENANT_HEADER} is {len(tenant)} characters long (max {MAX_TENANT_LENGTH})",
        )
    if "\x00" in tenant:
        return Rejection("invalid_tenant", f"header {TENANT_HEADER} contains a NUL character")
    return tenant


def key_tenant(key: bytes | None, separator: str) -> str:
    """The key's prefix up to ``separator`` (cut to 128 characters), or the default tenant when
    no separator is configured, the key has none, or the prefix is not UTF-8 without NUL."""
    if not separator or key is None:
        return DEFAULT_TENANT
    prefix, found, _ = key.partition(separator.encode("utf-8"))
    if not found:
        return DEFAULT_TENANT
    try:
        tenant = prefix.decode("utf-8")
    except UnicodeDecodeError:
        return DEFAULT_TENANT
    return DEFAULT_TENANT if "\x00" in tenant else tenant[:MAX_TENANT_LENGTH]


def parse_id(message_id: bytes | None) -> str | Rejection:
    if message_id is None or len(message_id) == 0:
        return Rejection("invalid_id", f"header {MESSAGE_ID_HEADER} is empty")
    try:
        id_text = message_id.decode("utf-8")
    except UnicodeDecodeError:
        return Rejection("invalid_id", f"header {MESSAGE_ID_HEADER} is not valid UTF-8")
    if len(id_text) > MAX_ID_LENGTH:
        return Rejection(
            "invalid_id",
            f"header {MESSAGE_ID_HEADER} is {len(id_text)} characters long (max {MAX_ID_LENGTH})",
        )
    if "\x00" in id_text:
        return Rejection("invalid_id", f"header {MESSAGE_ID_HEADER} contains a NUL character")
    return id_text


def parse_action(raw: bytes | None) -> Action | Rejection:
    text = (raw or b"").decode("utf-8", errors="replace").strip().lower()
    try:
        return Action(text)
    except ValueError:
        return Rejection(
            "unknown_action",
            f"header {ACTION_HEADER} {text[:64]!r} is not one of schedule, reschedule, cancel",
        )


def parse_cancel(
    message_id: bytes | None, key: bytes | None, now: datetime | None
) -> ScheduledMessage | Rejection:
    """A cancel needs only the id (its deadline, value and other headers are ignored)."""
    id_text = parse_id(message_id)
    if isinstance(id_text, Rejection):
        return id_text
    return ScheduledMessage(id_text, now or datetime.now(UTC), key, None, [], Action.CANCEL, None)


def parse_topic(raw: bytes | None, allowed: Callable[[str], bool] | None) -> str | Rejection:
    try:
        topic = (raw or b"").decode("ascii")
    except UnicodeDecodeError:
        return Rejection("invalid_topic", f"header {TOPIC_HEADER} is not ASCII")
    if not _is_topic_name(topic):
        return Rejection(
            "invalid_topic", f"header {TOPIC_HEADER} {topic[:64]!r} is not a Kafka topic name"
        )
    if topic.startswith("__"):
        return Rejection(
            "topic_not_allowed", f"header {TOPIC_HEADER} {topic!r} is an internal topic"
        )
    if allowed is None or not allowed(topic):
        return Rejection(
            "topic_not_allowed",
            f"header {TOPIC_HEADER} {topic!r} is not allowed (CHRONOS_ALLOWED_TOPICS; never "
            "the input or dead-letter topic, nor the audit topic)",
        )
    return topic


def storable_name(name: str) -> bool:
    if "\x00" in name:
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
