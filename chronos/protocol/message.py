"""What parsing an input record gives: a ``ScheduledMessage`` (with its ``Action``) or a
``Rejection`` with a stable code and a reason."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from chronos.protocol.names import DEFAULT_TENANT, Headers


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


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record that cannot be scheduled; it goes to the dead-letter topic with ``reason``."""

    code: str  # a stable category: the metric label
    reason: str  # the human-readable reason: the dead-letter header
