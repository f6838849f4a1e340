"""What operators find messages by (the admin list, its count and the bulk actions): a
``MessageFilter``, the statement parameters it becomes, and the results of a count and of one
batch of a bulk action. Used by both stores (``chronos.store.postgres.find`` and the in-memory
one), so a filter means the same on each."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from chronos.protocol import Headers, header_items

KEY_INDEXED_BYTES = 64
"""The key index holds each key's first 64 bytes: an exact or prefix match is a range of it."""
BULK_BATCH = 1_000  # rows one statement of a bulk action takes


def listed_bytes(key: bytes | None, headers: Headers) -> int:
    """What a row weighs in a page of the admin list or a find (``page_bytes``, against
    ``max_bytes``): its key's bytes and its headers' stored document as text, as Postgres
    renders the jsonb (``[{"name": "<base64>"}, {"other": null}]``, UTF-8): what the page
    carries of it besides the value, which a page leaves out."""
    items = header_items(headers)
    text = 0 if items is None else len(json.dumps(items, ensure_ascii=False).encode())
    return len(key or b"") + text


FIND_STATES = ("waiting", "claimed", "parked")
OUTCOMES = ("fired", "cancelled", "expired", "dead-lettered", "replaced")
"""The states of an ended message (``chronos.store.history``), as ``--state`` names them."""
ENDED = "ended"  # every outcome of the history
ENDED_STATES = (ENDED, *OUTCOMES)
"""The states of the history's records (``ended``: any of them)."""


@dataclass(frozen=True, slots=True)
class MessageFilter:
    """Rows matching every given field (None: any). ``topic`` matches ``target_topic``; with
    ``topic_unset`` it also matches rows without one (those go to the configured output topic,
    which ``topic`` then names). ``key`` is exact unless ``key_prefix``. ``deadline_from`` is
    inclusive, ``deadline_to`` exclusive. ``recurring``: True only series, False only one-shot
    messages."""

    state: str | None = None
    tenant: str | None = None
    topic: str | None = None
    topic_unset: bool = False
    id_prefix: str | None = None
    key: bytes | None = None
    key_prefix: bool = False
    deadline_from: datetime | None = None
    deadline_to: datetime | None = None
    recurring: bool | None = None

    def __post_init__(self) -> None:
        if self.state not in (None, *FIND_STATES, *ENDED_STATES):
            raise ValueError(f"unknown message state {self.state!r}")

    @property
    def ended(self) -> bool:
        """The filter asks for the history of ended messages, not the waiting ones."""
        return self.state in ENDED_STATES

    @property
    def outcomes(self) -> tuple[str, ...]:
        """The history's outcomes the filter asks for (none: it asks for waiting messages)."""
        if self.state == ENDED:
            return OUTCOMES
        return (self.state,) if self.state in OUTCOMES else ()

    @property
    def narrowed(self) -> bool:
        """Anything beyond the state is given: a bulk action needs at least this."""
        return any(
            v is not None
            for v in (
                self.tenant,
                self.topic,
                self.id_prefix,
                self.key,
                self.deadline_from,
                self.deadline_to,
                self.recurring,
            )
        )

    def params(self) -> dict[str, Any]:
        """The statement parameters of the ``find_*``, ``count_*`` and ``bulk_*`` queries."""
        key_low = key_high = None
        if self.key is not None:
            head = self.key[:KEY_INDEXED_BYTES]
            key_low = head
            key_high = next_prefix(head) if self.key_prefix else None
        return {
            "state": self.state,
            "tenant": self.tenant,
            "topic": self.topic,
            "topic_unset": self.topic_unset,
            "id_like": None if self.id_prefix is None else like_prefix(self.id_prefix),
            "key": self.key,
            "key_exact": self.key is not None and not self.key_prefix,
            "key_low": key_low,
            "key_high": key_high,
            "deadline_from": self.deadline_from,
            "deadline_to": self.deadline_to,
            "recurring": self.recurring,
        }

    def matches(
        self,
        *,
        tenant: str | None,
        topic: str | None,
        message_id: str,
        key: bytes | None,
        deadline: datetime,
        recurring: bool,
    ) -> bool:
        """The same test in Python (the in-memory store); the state is tested by the caller."""
        if self.tenant is not None and (tenant or "") != self.tenant:
            return False
        if self.topic is not None and not (
            topic == self.topic or (self.topic_unset and topic is None)
        ):
            return False
        if self.id_prefix is not None and not message_id.startswith(self.id_prefix):
            return False
        if self.key is not None:
            if key is None:
                return False
            if self.key_prefix and not key.startswith(self.key):
                return False
            if not self.key_prefix and key != self.key:
                return False
        if self.deadline_from is not None and deadline < self.deadline_from:
            return False
        if self.deadline_to is not None and deadline >= self.deadline_to:
            return False
        return self.recurring is None or self.recurring == recurring


def like_prefix(prefix: str) -> str:
    """A LIKE pattern matching the strings that start with ``prefix`` (its wildcards escaped)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def next_prefix(prefix: bytes) -> bytes | None:
    """The smallest byte string above every string starting with ``prefix`` (None: there is
    none, the prefix is empty or all 0xff)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return None
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


SAMPLE_ROWS = 10_000
"""About how many rows a count past its limit samples for its estimate."""


@dataclass(frozen=True, slots=True)
class MessageCount:
    """How many rows match: exact, or an estimate when ``exact`` is False (more rows matched
    than the exact count's limit: the share matching in a sample of about ``SAMPLE_ROWS``
    rows, scaled to the table, and never below that limit)."""

    count: int
    exact: bool


@dataclass(frozen=True, slots=True)
class BulkBatch:
    """One statement of a bulk action: what it did, and where the next one starts (None: the
    matching rows are done). ``claimed`` rows were left to fire (a cancel marked them: a series
    ends with the occurrence in flight)."""

    done: int
    claimed: int
    after: tuple[datetime, str] | None
    now: datetime  # the database clock: a reschedule's `since` for its next batches
