"""The enqueue statement's batch: one array per column (see ``enqueue_batch`` in
``chronos/store/sql/queries.sql``), sent in Postgres's binary format, split only when it would be
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

ENQUEUE_CHUNK_BYTES = 32 * 1024 * 1024
"""A consumed batch is written in statements of at most about this many bytes of parameters; an
ordinary batch is one statement."""


def chunks_by_size(messages: Sequence[ScheduledMessage], limit: int) -> list[tuple[int, int]]:
    """[start, end) ranges whose estimated encoded size stays under ``limit`` (at least 1 each)."""
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


_ACTION_CODES = {Action.SCHEDULE: "s", Action.RESCHEDULE: "r", Action.CANCEL: "c"}


def encode_batch(messages: Sequence[ScheduledMessage]) -> dict[str, Any]:
    """The enqueue statement's batch parameters: one list per column, in batch order (a cancel
    has no deadline). A new column is one more list here and one more ``unnest`` argument."""
    codes = _ACTION_CODES
    return {
        "ids": [m.id for m in messages],
        "actions": [codes[m.action] for m in messages],
        "deadlines": [None if m.action is Action.CANCEL else m.deadline for m in messages],
        "keys": [m.key for m in messages],
        "values": [m.value for m in messages],
        "topics": [m.target_topic for m in messages],
        "tenants": [m.tenant for m in messages],
        "recurrences": [m.recurrence for m in messages],
        "expires": [m.expires_ms for m in messages],
        "header_rows": [row for row, m in enumerate(messages, 1) for _ in m.headers],
        "header_names": [name for m in messages for name, _ in m.headers],
        "header_values": [value for m in messages for _, value in m.headers],
    }
