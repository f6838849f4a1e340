"""The admin API's request side: its errors, cursors, timestamps, query parameters and bodies,
each parsed strictly (a 400 naming the parameter), for ``chronos.admin.api``."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, unquote

from chronos.protocol import MAX_ID_LENGTH

MAX_BODY_BYTES = 4096  # a request body (only reschedule takes one) larger than this is a 413
MAX_DELAY_MS = 100 * 366 * 86_400_000  # a century: delay_ms beyond it is a 400
STATES = ("waiting", "claimed", "parked")
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
PAGE_MAX_BYTES = 4 * 1024 * 1024
"""What one listed page carries of keys and headers (at least one message, whatever its size):
1,000 rows of 1 MB keys must not build a gigabyte in the node."""
CURSOR_VERSION = 1
_MAX_CURSOR_LENGTH = 1024
_MAX_TIMESTAMP_LENGTH = 64
_LIMIT_RE = re.compile(r"^[0-9]{1,7}$")
_RFC3339_RE = re.compile(
    r"^(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})[Tt](?P<hm>[0-9]{2}:[0-9]{2}):(?P<second>[0-9]{2})"
    r"(?P<fraction>\.[0-9]+)?(?P<offset>[Zz]|[+-][0-9]{2}:[0-9]{2})$"
)


class ApiError(Exception):
    """An HTTP error answered as ``{"error": message}``."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


# -- cursors and parameters ------------------------------------------------------------------


def encode_cursor(deadline: datetime, message_id: str) -> str:
    """An opaque page token for "after (deadline, id)": URL-safe base64 of a small JSON."""
    payload = json.dumps(
        {"v": CURSOR_VERSION, "d": format_timestamp(deadline), "i": message_id},
        separators=(",", ":"),
    )
    return base64.urlsafe_b64encode(payload.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(token: str) -> tuple[datetime, str]:
    """The (deadline, id) a cursor encodes; ApiError 400 for anything not made by encode_cursor."""
    invalid = ApiError(400, "invalid cursor: pass next_cursor of a previous page unchanged")
    if not token or len(token) > _MAX_CURSOR_LENGTH:
        raise invalid
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
        payload = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError):
        raise invalid from None
    if not isinstance(payload, dict) or payload.get("v") != CURSOR_VERSION:
        raise invalid
    deadline_text, message_id = payload.get("d"), payload.get("i")
    if not isinstance(deadline_text, str) or not isinstance(message_id, str):
        raise invalid
    if not valid_id(message_id):
        raise invalid
    try:
        deadline = datetime.fromisoformat(deadline_text)
    except ValueError:
        raise invalid from None
    if deadline.tzinfo is None:
        raise invalid
    return deadline, message_id


def valid_id(message_id: str) -> bool:
    return 0 < len(message_id) <= MAX_ID_LENGTH and "\x00" not in message_id


_TIMESTAMP_MIN = datetime.min.replace(tzinfo=UTC)
_TIMESTAMP_MAX = datetime.max.replace(tzinfo=UTC)


def parse_timestamp(name: str, raw: str) -> datetime:
    """An RFC 3339 date-time (``2026-01-31T12:00:00Z``, ``...T13:00:00.5+01:00``) as an aware
    UTC datetime; anything else (no offset, a date alone) is a 400 naming the parameter.

    Instants beyond what Python represents (after applying the offset) are clamped: as bounds
    they mean "unbounded" either way; a leap second reads as the end of the second before.
    """
    match = _RFC3339_RE.fullmatch(raw) if len(raw) <= _MAX_TIMESTAMP_LENGTH else None
    if match is None:
        raise ApiError(
            400,
            f"{name}: expected an RFC 3339 instant with an offset, like 2026-01-31T12:00:00Z",
        )
    seconds, fraction = match["second"], match["fraction"] or ""
    if seconds == "60":
        seconds, fraction = "59", ".999999"
    offset = "+00:00" if match["offset"] in ("Z", "z") else match["offset"]
    text = f"{match['date']}T{match['hm']}:{seconds}{fraction[:7]}{offset}"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ApiError(400, f"{name}: {raw[:40]!r} is not a valid instant") from None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        return _TIMESTAMP_MIN if parsed.year == datetime.min.year else _TIMESTAMP_MAX


def format_timestamp(value: datetime | None) -> str | None:
    """UTC, microseconds kept, ``Z`` suffix."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_query(query: str, allowed: frozenset[str]) -> dict[str, str]:
    """Query parameters; 400 for an unknown or repeated one, or undecodable text."""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False, errors="strict")
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "the query string is not valid percent-encoded UTF-8") from None
    params: dict[str, str] = {}
    for name, value in pairs:
        if name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise ApiError(400, f"unknown query parameter {name[:40]!r} (known: {known})")
        if name in params:
            raise ApiError(400, f"query parameter {name!r} is repeated")
        if "\x00" in value:
            raise ApiError(400, f"query parameter {name!r} contains a NUL character")
        params[name] = value
    return params


def parse_bool(name: str, raw: str | None, default: bool = False) -> bool:
    if raw is None:
        return default
    if raw == "true":
        return True
    if raw == "false":
        return False
    raise ApiError(400, f"{name}: expected true or false")


def parse_limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    if not _LIMIT_RE.fullmatch(raw) or not 1 <= int(raw) <= MAX_LIMIT:
        raise ApiError(400, f"limit: expected an integer from 1 to {MAX_LIMIT}")
    return int(raw)


def parse_message_id(raw_segment: str) -> str:
    """The message id of a path segment (percent-decoded UTF-8); 400 if it cannot be an id."""
    try:
        message_id = unquote(raw_segment, errors="strict")
    except UnicodeDecodeError:
        raise ApiError(400, "message id: not valid percent-encoded UTF-8") from None
    if not valid_id(message_id):
        raise ApiError(
            400, f"message id: expected 1 to {MAX_ID_LENGTH} characters, no NUL character"
        )
    return message_id


@dataclass(frozen=True, slots=True)
class RescheduleBody:
    deadline: datetime | None
    delay_ms: int | None


def parse_reschedule_body(raw: bytes) -> RescheduleBody:
    """``{"deadline": "<RFC 3339>"}`` or ``{"delay_ms": <int>}``: exactly one, nothing else."""
    usage = 'expected a JSON object with exactly one of "deadline" (RFC 3339) and "delay_ms"'
    try:
        body = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError):
        raise ApiError(400, f"the body is not JSON: {usage}") from None
    if not isinstance(body, dict):
        raise ApiError(400, usage)
    unknown = sorted(set(body) - {"deadline", "delay_ms"})
    if unknown or len(body) != 1:
        raise ApiError(400, usage + (f" (unknown: {unknown[0][:40]!r})" if unknown else ""))
    if "deadline" in body:
        if not isinstance(body["deadline"], str):
            raise ApiError(400, "deadline: expected an RFC 3339 string")
        return RescheduleBody(parse_timestamp("deadline", body["deadline"]), None)
    delay = body["delay_ms"]
    if isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= MAX_DELAY_MS:
        raise ApiError(400, f"delay_ms: expected an integer from 0 to {MAX_DELAY_MS}")
    return RescheduleBody(None, delay)


def read_body(headers: Mapping[str, str], rfile: Any) -> bytes:
    """The request body (by Content-Length; none without one), at most MAX_BODY_BYTES."""
    length = headers.get("Content-Length")
    if length is None:
        return b""
    if not length.strip().isdigit():
        raise ApiError(400, "Content-Length is not a number")
    size = int(length)
    if size > MAX_BODY_BYTES:
        raise ApiError(413, f"the body is larger than {MAX_BODY_BYTES} bytes")
    return bytes(rfile.read(size)) if size else b""
