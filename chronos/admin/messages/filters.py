"""The admin API's filters (``GET /admin/v1/messages`` and the bulk actions take the same query
parameters), parsed strictly into a ``chronos.store.MessageFilter``; and the resume token of a
bulk action that stopped at its time budget."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime

from chronos.admin.params import (
    STATES,
    ApiError,
    decode_cursor,
    format_timestamp,
    parse_bool,
    parse_limit,
    parse_query,
    parse_timestamp,
    valid_id,
)
from chronos.protocol import MAX_ID_LENGTH
from chronos.store import MessageFilter
from chronos.store.filters import ENDED_STATES

MAX_KEY_BYTES = 1024  # a key filter longer than this is a 400
MAX_KEY_TEXT = 256  # characters of a key given as text (at most 1,024 bytes of UTF-8)
FILTER_PARAMS = frozenset(
    {
        "state",
        "tenant",
        "topic",
        "id_prefix",
        "key",
        "key_base64",
        "key_prefix",
        "deadline_from",
        "deadline_to",
        "recurring",
    }
)
LIST_PARAMS = FILTER_PARAMS | {"limit", "cursor", "count"}
BULK_PARAMS = FILTER_PARAMS | {"dry_run", "resume"}
RESUME_VERSION = 1


@dataclass(frozen=True, slots=True)
class ListParams:
    where: MessageFilter
    limit: int
    after: tuple[datetime, str] | None
    count: bool


@dataclass(frozen=True, slots=True)
class BulkParams:
    where: MessageFilter
    dry_run: bool
    resume: Resume | None


@dataclass(frozen=True, slots=True)
class Resume:
    """Where a bulk action stopped: after (deadline, id); a reschedule's first clock."""

    after: tuple[datetime, str]
    since: datetime | None


def parse_filter(
    params: dict[str, str], output_topic: str, *, ended: bool = False
) -> MessageFilter:
    """The filter the query parameters name; ``topic`` equal to the configured output topic
    also matches messages without a topic of their own (they go there). ``ended``: the state
    may name the history's (fired, cancelled, expired, dead-lettered, replaced, ended)."""
    state = params.get("state")
    states = (*STATES, *ENDED_STATES) if ended else STATES
    if state is not None and state not in states:
        raise ApiError(400, f"state: expected one of {', '.join(states)}")
    for name in ("tenant", "topic", "id_prefix"):
        value = params.get(name)
        if value is not None and not 0 < len(value) <= MAX_ID_LENGTH and name != "tenant":
            raise ApiError(400, f"{name}: expected 1 to {MAX_ID_LENGTH} characters")
        if name == "tenant" and value is not None and len(value) > MAX_ID_LENGTH:
            raise ApiError(400, f"tenant: expected at most {MAX_ID_LENGTH} characters")
    key = _key(params)
    key_prefix = parse_bool("key_prefix", params.get("key_prefix"))
    if key_prefix and key is None:
        raise ApiError(400, "key_prefix: give key or key_base64 too")
    bounds = {
        name: parse_timestamp(name, params[name]) if name in params else None
        for name in ("deadline_from", "deadline_to")
    }
    recurring = params.get("recurring")
    topic = params.get("topic")
    return MessageFilter(
        state=state,
        tenant=params.get("tenant"),
        topic=topic,
        topic_unset=topic is not None and topic == output_topic,
        id_prefix=params.get("id_prefix"),
        key=key,
        key_prefix=key_prefix,
        deadline_from=bounds["deadline_from"],
        deadline_to=bounds["deadline_to"],
        recurring=None if recurring is None else parse_bool("recurring", recurring),
    )


def _key(params: dict[str, str]) -> bytes | None:
    text, encoded = params.get("key"), params.get("key_base64")
    if text is not None and encoded is not None:
        raise ApiError(400, "key, key_base64: give one of them")
    if text is not None:
        if len(text) > MAX_KEY_TEXT:
            raise ApiError(400, f"key: expected at most {MAX_KEY_TEXT} characters")
        key = text.encode("utf-8")
    elif encoded is not None:
        try:
            key = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "key_base64: not base64") from None
    else:
        return None
    if not 0 < len(key) <= MAX_KEY_BYTES:
        raise ApiError(400, f"key: expected 1 to {MAX_KEY_BYTES} bytes")
    return key


def parse_list_params(query: str, output_topic: str = "") -> ListParams:
    params = parse_query(query, LIST_PARAMS)
    cursor = params.get("cursor")
    return ListParams(
        where=parse_filter(params, output_topic, ended=True),
        limit=parse_limit(params.get("limit")),
        after=decode_cursor(cursor) if cursor is not None else None,
        count=parse_bool("count", params.get("count")),
    )


def parse_bulk_params(query: str, output_topic: str) -> BulkParams:
    params = parse_query(query, BULK_PARAMS)
    where = parse_filter(params, output_topic)
    if not where.narrowed:
        raise ApiError(
            400,
            "a bulk action needs a filter beyond the state (tenant, topic, id_prefix, key, "
            "deadline_from, deadline_to or recurring)",
        )
    resume = params.get("resume")
    return BulkParams(
        where=where,
        dry_run=parse_bool("dry_run", params.get("dry_run")),
        resume=decode_resume(resume) if resume is not None else None,
    )


def encode_resume(resume: Resume) -> str:
    payload = json.dumps(
        {
            "v": RESUME_VERSION,
            "d": format_timestamp(resume.after[0]),
            "i": resume.after[1],
            "s": format_timestamp(resume.since),
        },
        separators=(",", ":"),
    )
    return base64.urlsafe_b64encode(payload.encode("utf-8")).decode("ascii").rstrip("=")


def decode_resume(token: str) -> Resume:
    invalid = ApiError(400, "invalid resume: pass the resume of the previous answer unchanged")
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
        payload = json.loads(raw.decode("utf-8"))
        if not isinstance(payload, dict) or payload.get("v") != RESUME_VERSION:
            raise invalid
        deadline = datetime.fromisoformat(payload["d"])
        since = None if payload["s"] is None else datetime.fromisoformat(payload["s"])
        message_id = payload["i"]
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise invalid from None
    if not isinstance(message_id, str) or not valid_id(message_id) or deadline.tzinfo is None:
        raise invalid
    return Resume((deadline, message_id), since)
