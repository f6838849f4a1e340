"""Headers on their way out and at rest: a fired record's relayed headers, the stored form of
headers (JSON of base64 values), and a dead-lettered record's headers."""

from __future__ import annotations

import hashlib
import json
from binascii import a2b_base64, b2a_base64
from collections.abc import Sequence
from datetime import datetime

from chronos.protocol.deadline import format_deadline, format_epoch
from chronos.protocol.names import (
    DEAD_LETTER_CODE_HEADER,
    DEAD_LETTER_DEADLINE_HEADER,
    DEAD_LETTER_ID_HEADER,
    DEAD_LETTER_REASON_HEADER,
    DEAD_LETTER_SOURCE_HEADER,
    DEAD_LETTER_TENANT_HEADER,
    DEAD_LETTER_TOPIC_HEADER,
    DEFAULT_TENANT,
    MAX_ID_LENGTH,
    RELAYED_INSTANT_HEADER,
    Headers,
)


def relay_headers(
    headers: Headers, message_id: str, deadline: float, id_header: str, deadline_header: str
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
        extra.append((deadline_header, format_epoch(deadline).encode()))
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


def scheduled_headers(
    message_id: str,
    deadline: datetime,
    topic: str | None,
    tenant: str,
    occurrence: bool = False,
) -> Headers:
    """What the dead letter of a scheduled message (expired, publish_failed) carries for its
    replay, its own Chronos headers being gone: the id to schedule it under, when it was due, its
    target topic (absent: the output topic) and its tenant (absent: the default one).

    An ``occurrence`` of a series is replayed under ``ID@INSTANT`` (its instant), not the
    series' id, which the series keeps while it waits (a replay under it would be ignored as a
    duplicate); ``DIGEST@INSTANT`` when that is longer than an id may be."""
    instant = format_deadline(deadline)
    replay_id = message_id
    if occurrence:
        replay_id = f"{message_id}@{instant}"
        if len(replay_id) > MAX_ID_LENGTH:
            replay_id = f"{hashlib.sha256(message_id.encode()).hexdigest()}@{instant}"
    out: Headers = [
        (DEAD_LETTER_ID_HEADER, replay_id.encode("utf-8")),
        (DEAD_LETTER_DEADLINE_HEADER, instant.encode("ascii")),
    ]
    if topic:
        out.append((DEAD_LETTER_TOPIC_HEADER, topic.encode("utf-8")))
    if tenant != DEFAULT_TENANT:
        out.append((DEAD_LETTER_TENANT_HEADER, tenant.encode("utf-8")))
    return out


def dead_letter_headers(
    headers: Sequence[tuple[str, bytes | None]] | None,
    reason: str,
    source: str,
    code: str,
    scheduled: Sequence[tuple[str, bytes | None]] = (),
) -> Headers:
    """Original headers (all of them, Chronos ones included) plus, for a scheduled message,
    ``scheduled_headers``, then the reason, the source and the reason's stable code
    (``topic_not_allowed``, ``expired``, ``publish_failed``...)."""
    out: Headers = [*(headers or ()), *scheduled]
    out.append((DEAD_LETTER_REASON_HEADER, reason.encode("utf-8")))
    out.append((DEAD_LETTER_SOURCE_HEADER, source.encode("utf-8")))
    out.append((DEAD_LETTER_CODE_HEADER, code.encode("utf-8")))
    return out
