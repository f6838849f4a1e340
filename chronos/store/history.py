"""The history of ended messages (``chronos_history``): what the firing loop tells the store about
each fired claim (``Ending``), what intake tells it about the messages it ends without storing
them (``EndedOnArrival``), what the admin API reads back (``EndedRecord``, ``HistorySummary``)
and the partitions the leader keeps (one a UTC day, each with the time to live it was created
with). Used by both stores, so a record means the same on each."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import NamedTuple, Protocol

from chronos.store.filters import OUTCOMES, MessageFilter

FIRED, CANCELLED, EXPIRED, DEAD_LETTERED, REPLACED = OUTCOMES

PARTITION_PREFIX = "chronos_history_p"
PARTITIONS_AHEAD = 2
"""Days after today whose partitions the leader creates ahead (today's too): a leader that
cannot reach the database for two days still finds every partition it needs."""
SERIES_RECORDS_PER_TTL = 1_000
"""At most about this many occurrences of one series are recorded per time to live (see
``record_occurrence``); every end of a series, and every occurrence that was not fired, is."""
REASON_LENGTH = 500  # chronos_history.reason is varchar(500)
BY_LENGTH = 255  # chronos_history.ended_by is varchar(255)
KAFKA_CANCEL = "kafka"
"""``ended_by`` of a message cancelled by a chronosAction: cancel record on the input topic."""


class Ending(NamedTuple):
    """How one fired claim ended, for its history record (a tuple: one cheap object per row).
    ``partition`` and ``offset`` are the delivered record's (None: dropped, not published)."""

    outcome: str = FIRED
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    lateness_ms: int | None = None
    reason: str | None = None


class EndedOnArrival(NamedTuple):
    """A message that ended without ever having a row: intake published it directly (already due
    as it arrived), or set it aside as it arrived (expired, refused by the database). Its history
    record, written by ``record_ended``: ``ending`` as the firing loop gives one (topic,
    partition and offset of the delivered record; None: dropped, never published), ``attempt``
    the publish attempt that delivered it (None: never published), ``key`` the message's."""

    id: str
    tenant: str  # '' : the default tenant
    deadline: datetime
    ending: Ending
    attempt: int | None = None
    recurring: bool = False
    key: bytes | None = None


@dataclass(frozen=True, slots=True)
class EndedRecord:
    """One history record: a message (or a series' occurrence) that ended. ``key``: the
    message's (None: it had none, or its record was written before the history kept keys)."""

    id: str
    tenant: str | None
    outcome: str
    deadline: datetime
    ended_at: datetime
    topic: str | None
    partition: int | None
    offset: int | None
    lateness_ms: int | None
    node: str | None
    attempt: int | None
    reason: str | None
    ended_by: str | None
    next_deadline: datetime | None
    recurring: bool
    key: bytes | None = None


@dataclass(frozen=True, slots=True)
class HistorySummary:
    """One tenant's ended messages of one outcome over a window: how many, and (fired) how
    late at the median and the 99th percentile."""

    tenant: str
    outcome: str
    count: int
    lateness_p50_ms: float | None
    lateness_p99_ms: float | None


@dataclass(frozen=True, slots=True)
class Partition:
    """A day's partition of the history and the time to live it was created with."""

    day: date
    ttl: timedelta

    @property
    def name(self) -> str:
        return partition_name(self.day)

    @property
    def start(self) -> datetime:
        return datetime(self.day.year, self.day.month, self.day.day, tzinfo=UTC)

    @property
    def end(self) -> datetime:
        return self.start + timedelta(days=1)

    def expired(self, now: datetime) -> bool:
        """Every record in it is older than its time to live."""
        return self.end + self.ttl <= now


@dataclass(frozen=True, slots=True)
class Maintenance:
    """What one round of the leader's history maintenance did, and what it could not do."""

    created: list[str]
    dropped: list[str]
    failed_creates: list[str]  # partitions it could not create (tried again next round)
    failed_drops: list[str]  # ... or drop
    partitions: int  # the daily partitions there are after it

    @property
    def failed(self) -> list[str]:
        return self.failed_creates + self.failed_drops


def partition_name(day: date) -> str:
    return f"{PARTITION_PREFIX}{day:%Y%m%d}"


_NAME = re.compile(rf"^{PARTITION_PREFIX}(\d{{8}})$")


def partition_day(name: str) -> date | None:
    """The day of a partition the leader created (None: not one of its names)."""
    match = _NAME.match(name)
    if match is None:
        return None
    try:
        return datetime.strptime(match[1], "%Y%m%d").replace(tzinfo=UTC).date()
    except ValueError:
        return None


def days_to_create(now: datetime, ahead: int = PARTITIONS_AHEAD) -> list[date]:
    """Today (UTC) and the ``ahead`` days after it."""
    today = now.astimezone(UTC).date()
    return [today + timedelta(days=n) for n in range(ahead + 1)]


def comment_ttl(comment: str | None, default: timedelta) -> timedelta:
    """The time to live a partition's comment gives (``chronos history ttl_ms=N``, written by
    ``chronos_history_create_partition``; ``default``: none readable)."""
    match = re.search(r"ttl_ms=(\d+)", comment or "")
    return default if match is None else timedelta(milliseconds=int(match[1]))


def record_occurrence(deadline: float, next_deadline: float | None, ttl: timedelta) -> bool:
    """Whether a fired occurrence of a series gets a history record: the last of the series
    always; otherwise the last one of each bucket of ``ttl / SERIES_RECORDS_PER_TTL`` (its next
    occurrence falls in a later bucket), so a series keeps about ``SERIES_RECORDS_PER_TTL``
    records per time to live however often it fires (each record says which occurrence follows
    it), and one firing less often than a bucket keeps every occurrence. Stateless: no read."""
    if next_deadline is None:
        return True
    bucket = ttl.total_seconds() / SERIES_RECORDS_PER_TTL
    if bucket <= 0:
        return True
    return int(next_deadline // bucket) != int(deadline // bucket)


def history_ttl_text(ttl: timedelta) -> str:
    """A time to live as people write it (7d, 12h, 90m, 30s)."""
    seconds = int(ttl.total_seconds())
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


class HistoryStore(Protocol):
    """What a store keeps of ended messages (part of ``chronos.store.Store``). ``history``: the
    statements that end messages record them (CHRONOS_HISTORY_TTL not 0)."""

    history: bool

    def maintain_history(self, ttl: timedelta, *, at: datetime | None = None) -> Maintenance:
        """The leader's round: drop the partitions past the TTL each was created with, create
        today's and the next ``PARTITIONS_AHEAD`` days' with ``ttl`` (none when it is 0). A
        record whose day has no partition is not written (counted; the message ends all the
        same). ``at``: the instant to maintain for (None: now)."""
        ...

    def record_ended(self, node_id: str, ended: Sequence[EndedOnArrival]) -> int:
        """Write the records of messages that ended without a row (intake's, ``node_id``'s),
        ended now, in one statement; how many were written: none while the history is off, and
        none when today has no partition (counted, as the statements that end stored messages
        count theirs: the caller goes on all the same). Another failure is raised."""
        ...

    def ended_messages(self, message_id: str, *, limit: int = 20) -> list[EndedRecord]:
        """A message's history records, newest first."""
        ...

    def find_ended(
        self,
        where: MessageFilter,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        max_bytes: int | None = None,
    ) -> list[EndedRecord]:
        """Up to ``limit`` records matching ``where`` (its state an outcome or ``ended``) in
        (deadline, id, ended_at) order, strictly after the (deadline, id) cursor. With
        ``max_bytes``, a message's records are taken while the keys of those before it weigh
        less (``page_weight``): the message that crosses it is the last one, whole."""
        ...

    def summarize_history(
        self,
        since: datetime,
        until: datetime | None = None,
        *,
        tenant: str | None = None,
        limit: int = 1000,
    ) -> list[HistorySummary]:
        """Counts by tenant and outcome of the records ended within [since, until), by tenant
        then outcome, with the fired ones' lateness p50 and p99."""
        ...

    def count_tenant_history(self, tenant: str, *, limit: int) -> int:
        """How many history records ``tenant`` has, counted up to ``limit`` (a dry run)."""
        ...

    def delete_tenant_history(self, tenant: str, *, batch: int) -> int:
        """Delete every record of up to ``batch`` of ``tenant``'s messages (a tenant's
        deletion, batch by batch); returns how many records went (0: none left)."""
        ...


def page_weight(record: EndedRecord) -> int:
    """What a history record weighs in a listed page (against ``max_bytes``): its key's bytes,
    the one part of it of no bounded size."""
    return len(record.key or b"")


def ending_sequence(ends: Sequence[Ending | None] | None, count: int) -> list[Ending | None]:
    """``ends`` as one entry a claim (None: each one fired, as delete_fired without them)."""
    if ends is None:
        return [Ending(FIRED)] * count
    if len(ends) != count:
        raise ValueError(f"{len(ends)} endings for {count} claims")
    return list(ends)
