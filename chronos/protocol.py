"""The Chronos message protocol: header names and parsing an input record.

An input record carries ``chronosMessageId`` (1-128 characters of UTF-8) and ``chronosDeadline``
(ISO-8601 with millisecond precision; no offset means UTC, ``Z`` or ``±hh:mm`` is converted).
``chronosAction`` (absent: ``schedule``) may say ``reschedule`` or ``cancel`` (a cancel needs no
deadline); ``chronosTopic`` names the topic to fire to instead of the output topic (allowed only if
it matches the configured patterns); ``chronosTenant`` (1-128 characters of UTF-8) names the tenant
the message belongs to for fair claiming under overload (absent: a prefix of the key when
``CHRONOS_TENANT_FROM_KEY`` names a separator, else the default tenant ``""``). Chronos headers are
not relayed; every other header is, in
order, repeats included.

``parse_record`` turns a raw record into a ``ScheduledMessage`` or a ``Rejection`` whose reason is a
short, stable, human-readable string (it becomes the dead-letter reason header).
"""

from __future__ import annotations

import json
import re
from binascii import a2b_base64, b2a_base64
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from fnmatch import fnmatchcase

from chronos.recurrence import (
    RecurrenceError,
    Rule,
    format_duration,
    make_rule,
    parse_duration_ms,
)

MESSAGE_ID_HEADER = "chronosMessageId"
DEADLINE_HEADER = "chronosDeadline"
ACTION_HEADER = "chronosAction"
TOPIC_HEADER = "chronosTopic"
TENANT_HEADER = "chronosTenant"
EVERY_HEADER = "chronosEvery"
CRON_HEADER = "chronosCron"
TIME_ZONE_HEADER = "chronosTimeZone"
UNTIL_HEADER = "chronosUntil"
MISSED_HEADER = "chronosMissed"
EXPIRES_HEADER = "chronosExpires"
OPTIONAL_HEADERS = (
    ACTION_HEADER,
    TOPIC_HEADER,
    TENANT_HEADER,
    EVERY_HEADER,
    CRON_HEADER,
    TIME_ZONE_HEADER,
    UNTIL_HEADER,
    MISSED_HEADER,
    EXPIRES_HEADER,
)
"""The Chronos headers a record may carry at most once besides the id and the deadline."""
RECURRENCE_HEADERS = (EVERY_HEADER, CRON_HEADER, TIME_ZONE_HEADER, UNTIL_HEADER, MISSED_HEADER)
CHRONOS_HEADERS = frozenset({MESSAGE_ID_HEADER, DEADLINE_HEADER, *OPTIONAL_HEADERS})

DEAD_LETTER_REASON_HEADER = "chronosDeadLetterReason"
DEAD_LETTER_SOURCE_HEADER = "chronosDeadLetterSource"

MAX_ID_LENGTH = 128
MAX_TENANT_LENGTH = 128
DEFAULT_TENANT = ""  # the tenant of a message that names none

Header = tuple[str, bytes | None]
Headers = list[Header]

# YYYY-MM-DDTHH:MM:SS[.fff[fff]][Z|±hh:mm]; a space is accepted in place of 'T'.
_DEADLINE_RE = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}:\d{2})"
    r"(?:\.(?P<frac>\d{1,6}))?"
    r"(?P<tz>Z|z|[+-]\d{2}:?\d{2})?$"
)


class Action(StrEnum):
    """What an input record asks for (the ``chronosAction`` header; absent: schedule)."""

    SCHEDULE = "schedule"  # store it unless the id is waiting or ready (idempotent)
    RESCHEDULE = "reschedule"  # store it, or replace the waiting message with that id
    CANCEL = "cancel"  # delete the waiting message with that id (and keep a cancel marker)


@dataclass(frozen=True, slots=True)
class ScheduledMessage:
    """A valid Chronos message: what is stored and later fired (or, for a cancel, the id to
    cancel: its deadline is the time it was read and is never stored)."""

    id: str
    deadline: datetime  # timezone-aware, UTC
    key: bytes | None
    value: bytes | None
    headers: Headers  # non-Chronos headers, in order
    action: Action = Action.SCHEDULE
    target_topic: str | None = None  # chronosTopic (None: the output topic)
    tenant: str = DEFAULT_TENANT  # chronosTenant, or the key's prefix (fair claiming)
    recurrence: str | None = None  # a series' rule (chronos.recurrence.Rule.encode); None: once
    expires_ms: int | None = None  # chronosExpires: how late it may fire (None: the default)


def topic_policy(
    output_topic: str, allowed_patterns: str, refused: Iterable[str] = ()
) -> Callable[[str], bool]:
    """Whether a ``chronosTopic`` may be fired to: the output topic always, any other topic only
    if it matches one of the comma-separated glob patterns (case-sensitive; empty: none) and is
    not one of ``refused`` (the input and dead-letter topics: a message fired there would be
    consumed again or read as a dead letter) — whatever the patterns say."""
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


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record that cannot be scheduled; it goes to the dead-letter topic with ``reason``."""

    code: str  # a stable category: the metric label
    reason: str  # the human-readable reason: the dead-letter header


class DeadlineError(ValueError):
    pass


def parse_deadline(raw: str) -> datetime:
    """Parse ``chronosDeadline`` into an aware UTC datetime (microsecond precision kept)."""
    match = _DEADLINE_RE.match(raw.strip())
    if match is None:
        raise DeadlineError(
            f"{DEADLINE_HEADER} {raw[:64]!r} is not ISO-8601 like 2022-12-01T11:09:01.123Z"
        )
    frac = (match["frac"] or "").ljust(6, "0")
    tz = match["tz"]
    if tz is None or tz in ("Z", "z"):
        suffix = "+00:00"
    else:
        suffix = tz if ":" in tz else f"{tz[:3]}:{tz[3:]}"
        if int(suffix[1:3]) > 23 or int(suffix[4:6]) > 59:
            raise DeadlineError(f"{DEADLINE_HEADER} {raw[:64]!r} has an impossible UTC offset")
    try:
        parsed = datetime.fromisoformat(f"{match['date']}T{match['time']}.{frac}{suffix}")
    except ValueError as exc:
        raise DeadlineError(
            f"{DEADLINE_HEADER} {raw[:64]!r} is not a valid instant: {exc}"
        ) from None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise DeadlineError(f"{DEADLINE_HEADER} {raw[:64]!r} is out of range") from None


def format_deadline(deadline: datetime) -> str:
    """The canonical header form: UTC, milliseconds, ``Z``."""
    utc = deadline.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def relay_headers(
    headers: Headers, message_id: str, deadline: datetime, id_header: str, deadline_header: str
) -> Headers:
    """A fired record's headers: its own, then (opt-in) its id and scheduled instant under the
    configured names, for consumers that deduplicate."""
    if not id_header and not deadline_header:
        return headers
    extra: Headers = []
    if id_header:
        extra.append((id_header, message_id.encode()))
    if deadline_header:
        extra.append((deadline_header, format_deadline(deadline).encode()))
    return [*headers, *extra]


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
            if not _storable_name(name):
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
    action = _parse_action(optional[ACTION_HEADER]) if ACTION_HEADER in seen else Action.SCHEDULE
    if isinstance(action, Rejection):
        return action
    if action is Action.CANCEL:
        return _parse_cancel(message_id, key, now)
    recurring = bool(seen) and (EVERY_HEADER in seen or CRON_HEADER in seen)
    if seen_deadline == 0 and not recurring:
        return Rejection("missing_deadline", f"missing header {DEADLINE_HEADER}")
    if seen_deadline > 1:
        return Rejection(
            "duplicate_header", f"header {DEADLINE_HEADER} appears {seen_deadline} times"
        )
    id_text = _parse_id(message_id)
    if isinstance(id_text, Rejection):
        return id_text
    target_topic = (
        _parse_topic(optional[TOPIC_HEADER], topic_allowed) if TOPIC_HEADER in seen else None
    )
    if isinstance(target_topic, Rejection):
        return target_topic
    tenant = (
        _parse_tenant(optional[TENANT_HEADER])
        if TENANT_HEADER in seen
        else _key_tenant(key, tenant_from_key)
    )
    if isinstance(tenant, Rejection):
        return tenant
    deadline: datetime | None = None
    if seen_deadline:
        deadline_or_rejection = _parse_deadline_header(deadline_raw)
        if isinstance(deadline_or_rejection, Rejection):
            return deadline_or_rejection
        deadline = deadline_or_rejection
    rule = (
        _parse_rule(optional) if seen and not seen.keys().isdisjoint(RECURRENCE_HEADERS) else None
    )
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
        _parse_expires(optional[EXPIRES_HEADER], deadline, rule is not None)
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


def _parse_deadline_header(raw: bytes | None) -> datetime | Rejection:
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


def _parse_rule(optional: dict[str, bytes | None]) -> Rule | Rejection | None:
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


def _parse_expires(raw: bytes | None, deadline: datetime, recurring: bool) -> int | Rejection:
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


def _parse_tenant(raw: bytes | None) -> str | Rejection:
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


def _key_tenant(key: bytes | None, separator: str) -> str:
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


def _parse_id(message_id: bytes | None) -> str | Rejection:
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


def _parse_action(raw: bytes | None) -> Action | Rejection:
    text = (raw or b"").decode("utf-8", errors="replace").strip().lower()
    try:
        return Action(text)
    except ValueError:
        return Rejection(
            "unknown_action",
            f"header {ACTION_HEADER} {text[:64]!r} is not one of schedule, reschedule, cancel",
        )


def _parse_cancel(
    message_id: bytes | None, key: bytes | None, now: datetime | None
) -> ScheduledMessage | Rejection:
    """A cancel needs only the id (its deadline, value and other headers are ignored)."""
    id_text = _parse_id(message_id)
    if isinstance(id_text, Rejection):
        return id_text
    return ScheduledMessage(id_text, now or datetime.now(UTC), key, None, [], Action.CANCEL, None)


def _parse_topic(raw: bytes | None, allowed: Callable[[str], bool] | None) -> str | Rejection:
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
            "the input or dead-letter topic)",
        )
    return topic


def _storable_name(name: str) -> bool:
    if "\x00" in name:
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def b64(value: bytes | None) -> str | None:
    """Bytes as base64 text (no newline), None kept: how stored and shown bytes are written."""
    return None if value is None else b2a_base64(value, newline=False).decode("ascii")


def unb64(text: str | None) -> bytes | None:
    return None if text is None else a2b_base64(text)


def header_items(headers: Headers) -> list[dict[str, str | None]] | None:
    """Headers as stored: ``[{"name": "<base64>" | null}, ...]`` (order and repeats kept)."""
    if not headers:
        return None
    return [{name: b64(v)} for name, v in headers]


def encode_headers(headers: Headers) -> str | None:
    """The stored headers as a JSON document."""
    items = header_items(headers)
    return None if items is None else json.dumps(items, separators=(",", ":"))


def decode_headers(stored: list[dict[str, str | None]] | str | None) -> Headers:
    if stored is None:
        return []
    items = json.loads(stored) if isinstance(stored, str) else stored
    out: Headers = []
    for item in items:
        ((name, v),) = item.items()
        out.append((name, unb64(v)))
    return out


def dead_letter_headers(
    headers: Sequence[tuple[str, bytes | None]] | None, reason: str, source: str
) -> Headers:
    """Original headers (all of them, Chronos ones included) plus the reason and the source."""
    out: Headers = list(headers or ())
    out.append((DEAD_LETTER_REASON_HEADER, reason.encode("utf-8")))
    out.append((DEAD_LETTER_SOURCE_HEADER, source.encode("utf-8")))
    return out
