"""Rows of the in-memory store (chronos.testing) and the errors its statements raise."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from chronos.errors import StoreError
from chronos.protocol import Headers, decode_headers


@dataclass(slots=True)
class StoredRow:
    """One row of ``chronos_messages`` as the in-memory store keeps it."""

    id: str
    deadline: datetime
    key: bytes | None
    value: bytes | None
    headers_json: str | None  # as stored: the encoded header list (None when no headers)
    enqueued_at: datetime
    readied_at: datetime | None = None
    readied_by: str | None = None
    attempts: int = 0
    last_error: str | None = None
    target_topic: str | None = None
    parked_at: datetime | None = None
    tenant: str | None = ""  # None: a row of a release before tenants
    recurrence: str | None = None  # a series' rule (None: fires once)
    expires_ms: int | None = None  # chronosExpires

    @property
    def headers(self) -> Headers:
        return decode_headers(self.headers_json)

    def end_claimed(self) -> None:
        """A cancel of this claimed row: the occurrence in flight is its last (the rule goes)
        and a replacement since the claim is void (no longer enqueued after it)."""
        if self.readied_at is not None:
            self.recurrence = None
            self.enqueued_at = min(self.enqueued_at, self.readied_at)

    def parked(self, park_attempts: int) -> bool:
        """Unclaimed and parked: stamped, or at the threshold by its attempts alone."""
        return self.readied_at is None and (
            self.parked_at is not None or (self.attempts > 0 and self.attempts >= park_attempts)
        )


@dataclass(slots=True)
class NodeRow:
    started_at: datetime
    heartbeat_at: datetime
    hostname: str | None
    version: str | None
    fired_per_second: float | None = None
    fired_at: datetime | None = None  # when the node last had a record delivered


def refused(message: str) -> StoreError:
    """The database refused the data itself (a data exception): retrying cannot succeed."""
    return StoreError(message, retryable=False)


def check_uuid(value: str, what: str) -> str:
    try:
        return str(uuid.UUID(value))
    except (ValueError, TypeError, AttributeError):
        raise refused(f"{what} failed: invalid input syntax for type uuid: {value!r}") from None
