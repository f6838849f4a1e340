"""Headers on their way out and at rest: a fired record's relayed headers, the stored form of
headers (JSON of base64 values), and a dead-lettered record's headers."""

from __future__ import annotations

import json
from binascii import a2b_base64, b2a_base64
from collections.abc import Sequence
from datetime import datetime

from chronos.protocol.deadline import format_deadline
from chronos.protocol.names import (
    DEAD_LETTER_CODE_HEADER,
    DEAD_LETTER_REASON_HEADER,
    DEAD_LETTER_SOURCE_HEADER,
    RELAYED_INSTANT_HEADER,
    Headers,
)


def relay_headers(
    headers: Headers, message_id: str, deadline: datetime, id_header: str, deadline_header: str
) -> Headers:
    """A fired record's headers: its own, then (opt-in) its id and scheduled instant under the
    configured names, for consumers that deduplicate. Every occurrence of a series shares its
    id, so a fired record's identity is the pair: whenever the id is relayed, the instant is too
    (under ``chronosScheduledFor`` if no deadline header is configured)."""
    if not id_header and not deadline_header:
        return headers
    extra: Headers = []
    if id_header:
        extra.append((id_header, message_id.encode()))
        deadline_header = deadline_header or RELAYED_INSTANT_HEADER
    if deadline_header:
        extra.append((deadline_header, format_deadline(deadline).encode()))
    return [*headers, *extra]


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
    headers: Sequence[tuple[str, bytes | None]] | None, reason: str, source: str, code: str
) -> Headers:
    """Original headers (all of them, Chronos ones included) plus the reason, the source and the
    reason's stable code (``topic_not_allowed``, ``expired``, ``publish_failed``...)."""
    out: Headers = list(headers or ())
    out.append((DEAD_LETTER_REASON_HEADER, reason.encode("utf-8")))
    out.append((DEAD_LETTER_SOURCE_HEADER, source.encode("utf-8")))
    out.append((DEAD_LETTER_CODE_HEADER, code.encode("utf-8")))
    return out
