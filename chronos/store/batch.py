"""The enqueue statement's batch: one array per column (see ``enqueue_batch`` in
``chronos/store/postgres/sql/``), sent in Postgres's binary format, split only when it would be
huge.

Keys, values and header values travel as raw bytes (no base64, no JSON on the client); the
stored header document (``[{"name": "<base64>" | null}, ...]``, the format every release reads)
is built by the server from the flattened headers: ``header_rows`` (the 1-based position in the
batch of each header's message), ``header_names`` and ``header_values``, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chronos.protocol import Action, ScheduledMessage
from chronos.store.arrays import bytea_array, int4_array, text_array, timestamptz_array

ENQUEUE_CHUNK_BYTES = 32 * 1024 * 1024
"""A consumed batch is written in statements of at most about this many bytes of parameters; an
ordinary batch is one statement."""


def chunks_by_size(messages: Sequence[ScheduledMessage], limit: int) -> list[tuple[int, int]]:
    """[start, end) ranges whose estimated encoded size stays under ``limit`` (at least 1 each);
    asked only of a batch whose encoding came out larger (``encoded_bytes``)."""
    ranges: list[tuple[int, int]] = []
    start, size = 0, 0
    for index, m in enumerate(messages):
        estimate = 200 + len(m.key or b"") + len(m.value or b"")
        if m.headers:
            estimate += sum(len(n) + len(v or b"") + 16 for n, v in m.headers)
        if index > start and size + estimate > limit:
            ranges.append((start, index))
            start, size = index, 0
        size += estimate
    ranges.append((start, len(messages)))
    return ranges


def encoded_bytes(params: dict[str, Any]) -> int:
    """The bytes of an encoded batch's arrays (what the statement's parameters weigh)."""
    return sum(len(v) for v in params.values() if isinstance(v, bytes))


_ACTION_CODES = {Action.SCHEDULE: "s", Action.RESCHEDULE: "r", Action.CANCEL: "c"}


def encode_batch(
    messages: Sequence[ScheduledMessage], partitions: Sequence[int | None] | None = None
) -> dict[str, Any]:
    """The enqueue statement's batch parameters: one array per column, in batch order (a cancel
    has no deadline), each already in Postgres's binary format (``chronos.store.arrays``). A new
    column is one more array here and one more ``unnest`` argument. ``partitions``: each
    message's input partition (None: not from Kafka)."""
    codes = _ACTION_CODES
    cancel = Action.CANCEL
    return {
        "ids": text_array([m.id for m in messages]),
        "actions": text_array([codes[m.action] for m in messages]),
        "deadlines": timestamptz_array(
            [None if m.action is cancel else m.deadline for m in messages]
        ),
        "keys": bytea_array([m.key for m in messages]),
        "values": bytea_array([m.value for m in messages]),
        "topics": text_array([m.target_topic for m in messages]),
        "tenants": text_array([m.tenant for m in messages]),
        "recurrences": text_array([m.recurrence for m in messages]),
        "expires": int4_array([m.expires_ms for m in messages]),
        "partitions": int4_array(list(partitions) if partitions else [None] * len(messages)),
        "header_rows": int4_array([row for row, m in enumerate(messages, 1) for _ in m.headers]),
        "header_names": text_array([name for m in messages for name, _ in m.headers]),
        "header_values": bytea_array([value for m in messages for _, value in m.headers]),
    }
