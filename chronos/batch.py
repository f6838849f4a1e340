"""The enqueue statement's batch: one JSON document per consumed batch (see ``enqueue_batch`` in
``chronos/sql/queries.sql``), encoded at C speed and split only when it would be huge."""

from __future__ import annotations

import json
from collections.abc import Sequence

from chronos.protocol import Action, ScheduledMessage, b64, header_items

ENQUEUE_CHUNK_BYTES = 32 * 1024 * 1024
"""A consumed batch is written in statements of at most about this much JSON (Postgres limits a
JSON document to 256 MB); an ordinary batch is one statement."""


def chunks_by_size(messages: Sequence[ScheduledMessage], limit: int) -> list[tuple[int, int]]:
    """[start, end) ranges whose estimated encoded size stays under ``limit`` (at least 1 each)."""
    ranges: list[tuple[int, int]] = []
    start, size = 0, 0
    for index, m in enumerate(messages):
        estimate = 200 + (len(m.key or b"") + len(m.value or b"")) * 4 // 3
        estimate += sum(len(n) + len(v or b"") * 4 // 3 + 16 for n, v in m.headers)
        if index > start and size + estimate > limit:
            ranges.append((start, index))
            start, size = index, 0
        size += estimate
    ranges.append((start, len(messages)))
    return ranges


_ACTION_CODES = {Action.SCHEDULE: "s", Action.RESCHEDULE: "r", Action.CANCEL: "c"}


def encode_batch(messages: Sequence[ScheduledMessage]) -> str:
    """A batch as one JSON document (see enqueue_batch): C-speed encoding, one parameter."""
    return json.dumps(
        [
            {
                "i": m.id,
                "a": _ACTION_CODES[m.action],
                "d": None if m.action is Action.CANCEL else m.deadline.isoformat(),
                "k": b64(m.key),
                "v": b64(m.value),
                "h": header_items(m.headers),
                "t": m.target_topic,
                "n": m.tenant,
            }
            for m in messages
        ],
        separators=(",", ":"),
    )
