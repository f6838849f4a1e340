"""The Store interface (what the loops and the admin API may ask of a store) and the values it
takes and returns. Implemented by ``chronos.store.PostgresStore`` and, for tests, by
``chronos.testing.MemoryStore``; re-exported from ``chronos.store``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import NamedTuple, Protocol

from chronos.protocol import Headers, ScheduledMessage
from chronos.store.backlog import Backlog, TenantBacklogs
from chronos.store.filters import BULK_BATCH, BulkBatch, MessageCount, MessageFilter
from chronos.store.flow import Catchup, Limit, Pause, PauseKind, PauseSet
from chronos.store.history import Ending, HistoryStore
from chronos.store.moves import MovesStore


class Outcome(Enum):
    """What enqueueing did with one consumed message."""

    INSERTED = "inserted"  # waiting in the table
    DUPLICATE = "duplicate"  # its id is already waiting or ready: ignored
    FIRE_NOW = "fire_now"  # deadline lapsed and id unknown: publish directly
    DUE_DUPLICATE = "due_duplicate"  # deadline lapsed but id already waiting/ready: ignored
    BLOCKED = "blocked"  # a schedule or reschedule of an id cancelled within the cancel TTL
    RESCHEDULED = "rescheduled"  # reschedule: inserted, or the waiting row replaced
    RESCHEDULE_CLAIMED = "reschedule_claimed"  # reschedule of a claimed (firing) row: unchanged
    CANCELLED = "cancelled"  # cancel: the waiting row was deleted
    CANCEL_CLAIMED = "cancel_claimed"  # cancel of a claimed (firing) row: not deleted
    CANCEL_UNKNOWN = "cancel_unknown"  # cancel of an id not scheduled (the marker is kept)
    MOVING = "moving"  # its partition is not this shard's now (being moved): not applied


class ClaimedRow(NamedTuple):
    """A claimed row as the firing loop needs it (a tuple: one cheap object per row)."""

    id: str
    deadline: float  # seconds since the epoch
    readied_at: datetime
    key: bytes | None
    value: bytes | None
    headers: Headers
    attempts: int
    last_error: str | None
    target_topic: str | None
    remaining_ms: float  # the time left until the deadline when the claim result arrived
    claimed_monotonic: float  # this process's time.monotonic() when the claim result arrived
    tenant: str = ""  # the message's tenant ('' : the default tenant)
    recurrence: str | None = None  # a series' stored rule (chronos.recurrence); None: once
    expires_ms: int | None = None  # chronosExpires (None: CHRONOS_MAX_LATENESS_MS)


@dataclass(frozen=True, slots=True)
class StuckRow:
    id: str
    readied_by: str
    readied_at: datetime


Claim = tuple[str, datetime]  # (id, readied_at): the fence of one claim
Advance = datetime | None
"""Where a fired claim's row goes: its series' next occurrence, or None (deleted)."""

UNBOUNDED_BYTES = 2**62  # a claim's byte budget when none is given
FAIR_TENANTS_PER_CLAIM = 10_000
"""A fair claim visits as many known tenants as it claims rows (each visited tenant with due
rows gets at least one), at most this many (two index probes each), the next ones in name order
after the previous fair claim's (a rotating window): with more tenants than the claim's batch,
each is visited every ``tenants / batch`` claims (rounded up)."""
KNOWN_TENANTS_MEMORY = 100_000  # tenants a store remembers having written (then it forgets all)
KNOWN_TENANTS_TTL_S = 30.0  # ... and it forgets them this often (the leader prunes tenants)


def row_bytes(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """What a claimed row weighs in memory, as the firing loop's byte budget counts it, and as
    every store's claim counts it against ``max_bytes`` (the claim SQL reads the same from the
    stored headers: names in characters, values decoded)."""
    size = len(key or b"") + len(value or b"")
    for name, v in headers:  # a loop, not sum() over a generator: half the cost per row
        size += len(name) + len(v or b"")
    return size


DEFAULT_CANCEL_TTL_MS = 3_600_000


# -- the admin and monitoring records (admin API, backlog gauges, heartbeats) ------------------

EXACT_COUNT_BELOW = 100_000
"""The backlog counts waiting rows exactly while the planner estimates fewer rows than this, and
gives the estimate above (a count never scans the table)."""
COUNT_LIMIT = 10_000
"""Parked and overdue counts (overall and per tenant) stop at this many rows: capped, not
scanned."""


class CancelOutcome(Enum):
    """What cancelling a message did."""

    CANCELLED = "cancelled"  # it was waiting (or parked) and is deleted
    CLAIMED = "claimed"  # a node has claimed it and may be firing it: left alone
    NOT_FOUND = "not_found"  # not scheduled (never was, fired, or cancelled)


class RequeueOutcome(Enum):
    """What requeueing a message did."""

    REQUEUED = "requeued"  # it was parked: attempts, parked_at and last_error reset
    NOT_PARKED = "not_parked"  # waiting or claimed: left alone
    NOT_FOUND = "not_found"  # not scheduled (never was, fired, or cancelled)


class RescheduleOutcome(Enum):
    """What rescheduling a message (admin API) did."""

    RESCHEDULED = "rescheduled"  # it was waiting: its deadline is the new one
    CLAIMED = "claimed"  # a node has claimed it and may be firing it: left alone
    PARKED = "parked"  # parked: left alone (requeue it first)
    NOT_FOUND = "not_found"  # not scheduled (never was, fired, or cancelled)


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """A scheduled message as the admin API shows it (``value`` only when asked for)."""

    id: str
    deadline: datetime
    readied_at: datetime | None
    readied_by: str | None
    attempts: int
    last_error: str | None
    target_topic: str | None
    enqueued_at: datetime
    key: bytes | None
    headers: Headers
    value_size: int | None  # None: a tombstone (NULL value)
    value: bytes | None
    parked_at: datetime | None = None  # None: not parked (or parked by attempts alone)
    recurrence: str | None = None  # a series' stored rule (chronos.recurrence); None: once
    # In a listed page: the bytes (keys and stored headers) of the page up to this row.
    page_bytes: int = 0
    tenant: str | None = None  # '' : the default tenant (None: not read, or before tenants)
    expires_ms: int | None = None  # chronosExpires (None: CHRONOS_MAX_LATENESS_MS)

    def state(self, park_attempts: int) -> str:
        """``claimed`` (a node holds it), ``parked`` (not claimed until requeued) or
        ``waiting``."""
        if self.readied_at is not None:
            return "claimed"
        if self.parked_at is not None or self.attempts >= park_attempts:
            return "parked"
        return "waiting"


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A node known from its heartbeat row, its claims, or both."""

    node_id: str
    live: bool  # heartbeat within the liveness window
    started_at: datetime | None
    heartbeat_at: datetime | None
    heartbeat_age_seconds: float | None
    hostname: str | None
    version: str | None
    claimed: int
    oldest_claim_at: datetime | None
    fired_per_second: float | None = None  # the node's own rate over its last heartbeat interval


LIST_QUERIES = {  # the states list_messages takes (None: all) and the statement of each
    None: "list_all",
    "waiting": "list_waiting",
    "claimed": "list_claimed",
    "parked": "list_parked",
}


class Store(HistoryStore, MovesStore, Protocol):
    def enqueue(
        self,
        messages: Sequence[ScheduledMessage],
        advance_ms: int,
        cancel_ttl_ms: int = DEFAULT_CANCEL_TTL_MS,
        *,
        output_topic: str = "",
        catchup_after_ms: int | None = None,
        partitions: Sequence[int | None] | None = None,
        fenced: bool = False,
    ) -> list[Outcome]:
        """Apply a batch. A one-shot schedule due within ``advance_ms`` comes back FIRE_NOW (not
        stored: intake publishes it) unless flow control holds it: its tenant or target topic
        (``output_topic`` when it names none) paused or rate-limited, or it is overdue by more
        than ``catchup_after_ms`` (the paced catch-up; None: off). Those are stored, and wait.
        ``partitions``: each message's input partition, stored with it; ``fenced`` (several
        shards): a message of a partition this shard does not take now comes back MOVING."""
        ...

    def claim(
        self,
        node_id: str,
        horizon_ms: int,
        limit: int,
        park_attempts: int,
        *,
        max_bytes: int = UNBOUNDED_BYTES,
        first_always: bool = True,
        fair: bool = False,
        exclude_tenants: Sequence[str] = (),
        paused: PauseSet | None = None,
        max_lateness_ms: int | None = None,
        catchup: Catchup | None = None,
    ) -> list[ClaimedRow]: ...

    def pause(self, kind: PauseKind, name: str, paused_by: str) -> Pause:
        """Pause a tenant or a target topic (again: the first pause is kept)."""
        ...

    def resume(self, kind: PauseKind, name: str) -> Pause | None:
        """End a pause; returns it (None: it was not paused)."""
        ...

    def pauses(self) -> list[Pause]:
        """What is paused, oldest first."""
        ...

    def set_limit(self, kind: PauseKind, name: str, per_second: int, set_by: str) -> Limit:
        """Limit a tenant or a target topic (replacing its limit)."""
        ...

    def clear_limit(self, kind: PauseKind, name: str) -> Limit | None:
        """Remove a limit; returns it (None: there was none)."""
        ...

    def limits(self) -> list[Limit]:
        """Every rate limit, by kind and name."""
        ...

    def several_tenants(self) -> bool:
        """More than one tenant is known (chronos_tenants): the claim-ahead budget is shared."""
        ...

    def delete_fired(
        self,
        node_id: str,
        claims: Sequence[Claim],
        nexts: Sequence[Advance] | None = None,
        ends: Sequence[Ending | None] | None = None,
    ) -> set[str]:
        """Delete the fired claims' rows ("delete or advance": a claim whose ``nexts`` entry is
        an instant advances its series' row to it instead); returns the ids done. A batch
        holding any occurrence of a series passes ``nexts`` (None for a claim with no next
        occurrence): only then is a row replaced by a reschedule while claimed given back (a
        new message) rather than deleted, and a live cancel deletes it. Without ``nexts`` it is
        the plain delete of one-shot messages (a claimed one is never replaced). With the
        history on, each claim done is recorded as its ``ends`` entry says (None: not
        recorded; ``ends`` None: fired), in the same statement."""
        ...

    def release(
        self,
        node_id: str,
        claims: Sequence[Claim],
        *,
        failed: bool,
        errors: Sequence[str] | None = None,
        park_attempts: int | None = None,
    ) -> dict[str, int]: ...

    def release_node(self, node_id: str, since: datetime | None = None) -> int: ...

    def park_exhausted(self, park_attempts: int) -> int: ...

    def find_stuck(
        self, hold_ms: int, limit: int, own: tuple[str, datetime | None] | None = None
    ) -> list[StuckRow]: ...

    def reset_stuck(self, rows: Sequence[StuckRow]) -> list[tuple[str, str]]: ...

    def ping(self) -> datetime: ...

    def close(self) -> None: ...

    # -- admin and monitoring (admin API, backlog gauges, heartbeats) ---------------------------

    def backlog(
        self,
        park_attempts: int,
        *,
        exact_below: int = EXACT_COUNT_BELOW,
        count_limit: int = COUNT_LIMIT,
    ) -> Backlog: ...

    def tenant_backlog(
        self, park_attempts: int, *, limit: int, count_limit: int = ..., max_tenants: int = ...
    ) -> TenantBacklogs: ...

    def get_message(
        self, message_id: str, *, include_value: bool = False
    ) -> MessageRecord | None: ...

    def list_messages(
        self,
        *,
        state: str | None,
        park_attempts: int,
        limit: int,
        deadline_from: datetime | None = None,
        deadline_to: datetime | None = None,
        after: tuple[datetime, str] | None = None,
        max_bytes: int | None = None,
    ) -> list[MessageRecord]:
        """Up to ``limit`` rows in ``state`` (None: all) ordered by (deadline, id), strictly
        after the cursor ``after``; ``deadline_from`` inclusive, ``deadline_to`` exclusive. With
        ``max_bytes``, rows are taken while their keys' and headers' bytes (``page_bytes``, a
        running sum) stay under it, plus the row that crosses it (so the caller knows there is
        more)."""
        ...

    def cancel_message(
        self,
        message_id: str,
        cancel_ttl_ms: int = DEFAULT_CANCEL_TTL_MS,
        *,
        by: str | None = None,
    ) -> CancelOutcome:
        """Cancel a waiting or parked message (a claimed one may be firing: CLAIMED). Leaves a
        cancel marker for ``cancel_ttl_ms`` whatever the outcome, as a Kafka cancel does. The
        history record of a deleted one says it was cancelled ``by`` whom."""
        ...

    def find_messages(
        self,
        where: MessageFilter,
        *,
        park_attempts: int,
        limit: int,
        after: tuple[datetime, str] | None = None,
        max_bytes: int | None = None,
    ) -> list[MessageRecord]:
        """As ``list_messages``, of the rows matching ``where`` (every state unless it names
        one)."""
        ...

    def count_messages(
        self, where: MessageFilter, *, park_attempts: int, count_limit: int
    ) -> MessageCount:
        """How many rows match ``where``: exact below ``count_limit``, else an estimate
        (``exact`` False; at least ``count_limit``)."""
        ...

    def bulk_cancel(
        self,
        where: MessageFilter,
        *,
        park_attempts: int,
        after: tuple[datetime, str] | None = None,
        cancel_ttl_ms: int = DEFAULT_CANCEL_TTL_MS,
        batch: int = BULK_BATCH,
        by: str | None = None,
    ) -> BulkBatch:
        """One statement: up to ``batch`` matching rows after the cursor are cancelled as
        ``cancel_message`` cancels one (unclaimed: deleted; claimed: a series ends with the
        occurrence in flight; each gets a cancel marker)."""
        ...

    def bulk_reschedule(
        self,
        where: MessageFilter,
        *,
        park_attempts: int,
        after: tuple[datetime, str] | None = None,
        since: datetime | None = None,
        deadline: datetime | None = None,
        shift_ms: int | None = None,
        fire_now: bool = False,
        batch: int = BULK_BATCH,
    ) -> BulkBatch:
        """One statement: up to ``batch`` matching waiting rows after the cursor and inserted
        (or last moved) at or before ``since`` move to ``deadline``, by ``shift_ms`` or to now
        (``fire_now``: rows not yet due); exactly one of the three."""
        ...

    def requeue_message(self, message_id: str, park_attempts: int) -> RequeueOutcome: ...

    def reschedule_message(
        self,
        message_id: str,
        park_attempts: int,
        *,
        deadline: datetime | None = None,
        delay_ms: int | None = None,
    ) -> tuple[RescheduleOutcome, MessageRecord | None]: ...

    def heartbeat(
        self,
        node_id: str,
        *,
        started_at: datetime | None = None,
        hostname: str | None = None,
        version: str | None = None,
        fired_per_second: float | None = None,
        fired_ago_s: float | None = None,
    ) -> None:
        """Write the node's heartbeat: now (database clock), its fire rate, and when it last had
        a record delivered, ``fired_ago_s`` seconds ago (None: not yet)."""
        ...

    def register_node(
        self, node_id: str, live_s: float, *, hostname: str | None, version: str | None
    ) -> datetime | None: ...

    def remove_node(self, node_id: str) -> bool: ...

    def expire_nodes(self, retain_s: float) -> int: ...

    def dead_messages(self) -> tuple[int, bool]:
        """The messages table's dead row versions, and whether this store may vacuum it."""
        ...

    def vacuum_messages(self) -> None:
        """Vacuum the messages table (the leader's, ``chronos.cluster.vacuum``)."""
        ...

    def prune_tenants(self, limit: int) -> int:
        """Forget up to ``limit`` known tenants with no waiting message (never the default
        one): the fair claim visits the known tenants in turn, so stale ones would slow every
        tenant's turn. Returns how many were forgotten."""
        ...

    def list_nodes(self, live_s: float, *, include_dead: bool = False) -> list[NodeRecord]: ...

    # -- leadership (chronos.cluster.leadership; Postgres side in
    # chronos.store.postgres.leadership) -------------

    def elect_leader(self, window_ms: int) -> str | None: ...

    def peers_delivering(self, node_id: str, within_ms: int) -> int:
        """How many other nodes had a record delivered within the last ``within_ms`` (database
        clock), as their heartbeats said (``fired_ago_s``)."""
        ...

    def reset_lapsed_claims(
        self, window_ms: int, node_id: str, limit: int
    ) -> list[tuple[str, str]]: ...
