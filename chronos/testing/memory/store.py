"""In-memory test doubles of the Store, the Publisher and the input consumer.

``InMemoryStore`` implements :class:`chronos.store.Store` with the semantics of the named SQL in
``chronos/store/postgres/sql/`` (deadlines and claims compared on an injectable clock, claims
fenced by ``readied_by`` and ``readied_at``, the schema's column limits enforced as ``StoreError``).
``FakePublisher`` (a :class:`chronos.kafka.Publisher` whose deliveries the test decides) and
``FakeConsumer`` live in :mod:`chronos.testing.kafka` and are re-exported here.
``ManualClock`` gives the store (wall clock) and the firing loop (monotonic clock) one time line
that only moves when the test says so.

The loops take these in place of Postgres and Kafka, so their behaviour can be tested quickly and
deterministically; the integration tests re-run the same behaviours against the real services.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from chronos.cluster.leadership import Leadership
from chronos.errors import StoreError
from chronos.protocol import (
    DEFAULT_TENANT,
    MAX_ID_LENGTH,
    Action,
    ScheduledMessage,
    encode_headers,
)
from chronos.store import (
    DEFAULT_CANCEL_TTL_MS,
    FAIR_TENANTS_PER_CLAIM,
    UNBOUNDED_BYTES,
    Advance,
    Catchup,
    Claim,
    ClaimedRow,
    Limit,
    Outcome,
    Pause,
    PauseKind,
    PauseSet,
    row_bytes,
)
from chronos.store.history import (
    CANCELLED,
    FIRED,
    KAFKA_CANCEL,
    REPLACED,
    Ending,
    ending_sequence,
)
from chronos.store.moves import PartitionMove
from chronos.testing.clock import ManualClock
from chronos.testing.kafka import FakeConsumer, FakePublisher, ProducedRecord, make_record
from chronos.testing.memory.admin import InMemoryAdmin
from chronos.testing.memory.find import InMemoryFind
from chronos.testing.memory.flow import InMemoryFlow
from chronos.testing.memory.history import InMemoryHistory
from chronos.testing.memory.recovery import InMemoryRecovery
from chronos.testing.memory.rows import NodeRow, StoredRow, check_uuid, refused

__all__ = [
    "FakeConsumer",
    "FakePublisher",
    "InMemoryStore",
    "ManualClock",
    "ProducedRecord",
    "StoredRow",
    "make_record",
]

_LAST_ERROR_LENGTH = 500  # chronos_messages.last_error is varchar(500)


# ------------------------------------------------------------------------------------ store


class InMemoryStore(InMemoryHistory, InMemoryAdmin, InMemoryFind, InMemoryFlow, InMemoryRecovery):
    """A ``Store`` held in a dict, with the semantics of the SQL and an injectable clock
    (``InMemoryHistory`` first: its ``_ended`` is the one the other parts call).

    ``clock`` returns the "database" time (timezone-aware); every comparison the SQL makes with
    ``now()`` is made with it. ``monotonic`` is the claiming process's monotonic clock, stamped on
    each claimed row as its result arrives (a ``ManualClock`` supplies both). Thread-safe: the
    node runs its loops on threads.
    ``fail_next(n)`` makes the next ``n`` statements raise a retryable ``StoreError`` (an outage);
    data the schema cannot hold raises a ``StoreError`` that is not retryable, as Postgres does.
    """

    def __init__(
        self,
        clock: Callable[[], datetime] | None = None,
        monotonic: Callable[[], float] | None = None,
        *,
        history: bool = True,
    ):
        if isinstance(clock, ManualClock):
            self.clock: Callable[[], datetime] = clock.now
            self.monotonic: Callable[[], float] = monotonic or clock.monotonic
        else:
            self.clock = clock or (lambda: datetime.now(UTC))
            self.monotonic = monotonic or time.monotonic
        self._rows: dict[str, StoredRow] = {}
        self._nodes: dict[str, NodeRow] = {}
        self._cancels: dict[str, datetime] = {}  # chronos_cancels: id -> expires_at
        self._tenants: set[str] = {DEFAULT_TENANT}  # chronos_tenants
        self._pauses: dict[tuple[PauseKind, str], Pause] = {}  # chronos_pauses
        self._limits: dict[tuple[PauseKind, str], Limit] = {}  # chronos_limits
        self.moves: list[PartitionMove] = []  # chronos_partition_moves (tests write it)
        self.shard = 0  # chronos_shard's shard: which partitions the fence refuses
        self.history, self._history, self._partitions, self.unrecorded = history, [], {}, 0
        self.fair_tenants_per_claim = FAIR_TENANTS_PER_CLAIM
        self._fair_cursor = ""  # the last tenant the previous fair claim visited
        self.fair_claims = 0  # claims run as claim_due_fair (a test convenience)
        self._lock = threading.RLock()
        self._failures: list[tuple[str | None, StoreError]] = []
        self.closed = False
        self.statements: list[str] = []  # names of the statements run, in order

    # -- test conveniences ---------------------------------------------------------------------

    def fail_next(
        self,
        count: int = 1,
        operation: str | None = None,
        message: str = "",
        *,
        refused: bool = False,
    ) -> None:
        """Make the next ``count`` statements (of ``operation``, if given) raise StoreError
        (``refused``: as a missing grant does)."""
        with self._lock:
            for _ in range(count):
                text = message or f"{operation or 'statement'} failed: injected"
                error = StoreError(text, refused=refused)
                self._failures.append((operation, error))

    def rows(self) -> dict[str, StoredRow]:
        """A snapshot (copies) of every row, by id."""
        with self._lock:
            return {k: replace(v) for k, v in self._rows.items()}

    def get(self, message_id: str) -> StoredRow | None:
        with self._lock:
            row = self._rows.get(message_id)
            return replace(row) if row is not None else None

    def set_tenant(self, message_id: str, tenant: str | None) -> None:
        """Write a row's tenant column as any release might have (None: before tenants)."""
        with self._lock:
            self._rows[message_id].tenant = tenant

    def claimed(self) -> list[StoredRow]:
        with self._lock:
            return [replace(r) for r in self._rows.values() if r.readied_at is not None]

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def __contains__(self, message_id: object) -> bool:
        with self._lock:
            return message_id in self._rows

    def _statement(self, name: str) -> datetime:
        """Bookkeeping shared by every statement; returns ``now()`` for the statement."""
        if self.closed:
            raise StoreError(f"{name} failed: the store is closed")
        self.statements.append(name)
        for index, (operation, error) in enumerate(self._failures):
            if operation is None or operation == name:
                del self._failures[index]
                raise error
        now = self.clock()
        if now.tzinfo is None:
            raise ValueError("the store clock must return timezone-aware datetimes")
        return now

    # -- the Store interface -------------------------------------------------------------------

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
        if not messages:
            return []
        moving = self._refused(partitions) if fenced else set()
        if moving:  # the moving partitions' messages are not applied
            kept = [m for m, p in zip(messages, partitions or (), strict=True) if p not in moving]
            applied = iter(
                self.enqueue(
                    kept,
                    advance_ms,
                    cancel_ttl_ms,
                    output_topic=output_topic,
                    catchup_after_ms=catchup_after_ms,
                )
            )
            return [Outcome.MOVING if p in moving else next(applied) for p in partitions or ()]
        ids = [m.id for m in messages]
        if len(set(ids)) != len(ids):
            raise ValueError("enqueue: ids must be distinct within a batch")
        with self._lock:
            now = self._statement("enqueue_batch")
            for m in messages:
                if len(m.id) > MAX_ID_LENGTH:
                    raise refused(
                        "enqueue_batch failed: value too long for type character varying(128)"
                    )
                if "\x00" in m.id:
                    raise refused("enqueue_batch failed: invalid byte sequence (NUL)")
                if m.deadline.tzinfo is None:
                    raise refused("enqueue_batch failed: naive deadline")
            self._tenants.update(m.tenant for m in messages if m.action is not Action.CANCEL)
            threshold = now + timedelta(milliseconds=advance_ms)
            existed_before = {m.id for m in messages if m.id in self._rows}
            blocked = {m.id for m in messages if self._cancels.get(m.id, now) > now}
            batch_cancels = {m.id for m in messages if m.action is Action.CANCEL}
            expired = [i for i, at in self._cancels.items() if at <= now and i not in batch_cancels]
            for i in sorted(expired, key=lambda i: self._cancels[i])[:1000]:
                del self._cancels[i]
            held = self._held_by_flow(messages, now, output_topic, catchup_after_ms)
            return [
                self._apply(m, now, threshold, existed_before, blocked, cancel_ttl_ms, held)
                for m in messages
            ]

    def _apply(
        self,
        m: ScheduledMessage,
        now: datetime,
        threshold: datetime,
        existed_before: set[str],
        blocked: set[str],
        cancel_ttl_ms: int,
        held: set[str],
    ) -> Outcome:
        """One message of an enqueued batch, as the enqueue statement treats it."""
        row = self._rows.get(m.id)
        if m.action is Action.CANCEL:
            self._cancels[m.id] = now + timedelta(milliseconds=cancel_ttl_ms)
            if row is None:
                return Outcome.CANCEL_UNKNOWN
            if row.readied_at is not None:
                row.end_claimed()  # a claimed series: that occurrence is its last
                return Outcome.CANCEL_CLAIMED
            del self._rows[m.id]
            self._ended(row, now, CANCELLED, reason="chronosAction: cancel", by=KAFKA_CANCEL)
            return Outcome.CANCELLED
        if m.id in blocked:
            return Outcome.BLOCKED
        fresh = StoredRow(
            id=m.id,
            deadline=m.deadline,
            key=None if m.key is None else bytes(m.key),
            value=None if m.value is None else bytes(m.value),
            headers_json=encode_headers(m.headers),
            enqueued_at=now,
            target_topic=m.target_topic,
            tenant=m.tenant,
            recurrence=m.recurrence,
            expires_ms=m.expires_ms,
        )
        if m.action is Action.RESCHEDULE:
            if row is not None and row.readied_at is not None:
                if row.recurrence is None:
                    return Outcome.RESCHEDULE_CLAIMED
                # A claimed series is replaced all the same, its claim kept: its advance gives
                # it back (enqueued after the claim, as clock_timestamp() is in the SQL).
                fresh.readied_at, fresh.readied_by = row.readied_at, row.readied_by
                fresh.enqueued_at = max(now, row.readied_at + timedelta(microseconds=1))
            elif row is not None:
                self._ended(row, now, REPLACED, reason="chronosAction: reschedule", by=KAFKA_CANCEL)
            self._rows[m.id] = fresh
            return Outcome.RESCHEDULED
        if m.deadline <= threshold and m.recurrence is None and m.id not in held:
            return Outcome.DUE_DUPLICATE if m.id in existed_before else Outcome.FIRE_NOW
        if row is not None:
            return Outcome.DUPLICATE
        self._rows[m.id] = fresh
        return Outcome.INSERTED

    def several_tenants(self) -> bool:
        with self._lock:
            return len(self._tenants) > 1

    def cancel_markers(self) -> dict[str, datetime]:
        """The live and expired cancel markers not yet purged, by id (a test convenience)."""
        with self._lock:
            return dict(self._cancels)

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
    ) -> list[ClaimedRow]:
        with self._lock:
            fair = (fair or bool(exclude_tenants)) and catchup is None
            now = self._statement("claim_due")
            self.fair_claims += fair
            node = check_uuid(node_id, "claim_due")
            horizon = now + timedelta(milliseconds=horizon_ms)
            ready = [r for r in self._rows.values() if r.readied_at is None and r.parked_at is None]
            due = [r for r in ready if r.deadline <= horizon and r.attempts < park_attempts]
            due = [r for r in due if self._claimable(r, now, paused, max_lateness_ms)]
            due.sort(key=lambda r: r.deadline)  # stable: insertion order breaks ties
            limit = max(0, limit)
            if fair:
                with_due = {r.tenant for r in ready if r.deadline <= horizon}
                due = self._fair_share(due, with_due, limit, set(exclude_tenants))
            elif catchup is not None:
                due = self._paced(due, now, catchup, limit)
                limit = len(due)
            claimed: list[ClaimedRow] = []
            arrived = self.monotonic()
            running = 0
            for row in due[:limit]:
                size = row_bytes(row.key, row.value, row.headers)
                running += size
                if running > max_bytes and not (first_always and running == size):
                    break
                # Never stamped before the enqueue of the row it claims (a replacement of a
                # claimed series is stamped a microsecond after its claim): as the SQL does.
                row.readied_at = max(now, row.enqueued_at)
                row.readied_by = node
                claimed.append(
                    ClaimedRow(
                        id=row.id,
                        deadline=row.deadline.timestamp(),
                        readied_at=row.readied_at,
                        key=row.key,
                        value=row.value,
                        headers=row.headers,
                        attempts=row.attempts,
                        last_error=row.last_error,
                        target_topic=row.target_topic,
                        remaining_ms=(row.deadline - now).total_seconds() * 1000,
                        claimed_monotonic=arrived,
                        tenant=row.tenant or "",
                        recurrence=row.recurrence,
                        expires_ms=row.expires_ms,
                    )
                )
            claimed.sort(key=lambda r: r.deadline)  # oldest first, as the store returns them
            return claimed

    def _fenced(self, node: str, claim: Claim) -> StoredRow | None:
        row = self._rows.get(claim[0])
        if row is None or row.readied_by != node or row.readied_at != claim[1]:
            return None
        return row

    def delete_fired(
        self,
        node_id: str,
        claims: Sequence[Claim],
        nexts: Sequence[Advance] | None = None,
        ends: Sequence[Ending | None] | None = None,
    ) -> set[str]:
        if not claims:
            return set()
        advancing = nexts is not None  # a batch with series: advance_fired, even with no next
        endings = ending_sequence(ends, len(claims))
        with self._lock:
            now = self._statement("advance_fired" if advancing else "delete_fired")
            node = check_uuid(node_id, "delete_fired")
            done: set[str] = set()
            for claim, next_at, end in zip(
                claims, nexts or [None] * len(claims), endings, strict=True
            ):
                row = self._fenced(node, claim)
                if row is None:
                    continue
                done.add(claim[0])
                advance = (  # the row advances to its next occurrence (not replaced nor cancelled)
                    advancing
                    and next_at is not None
                    and row.recurrence is not None
                    and self._cancels.get(row.id, now) <= now
                    and not (row.readied_at is not None and row.enqueued_at > row.readied_at)
                )
                if end is not None:
                    self._ended(
                        row,
                        now,
                        FIRED,
                        ending=end,
                        node=node,
                        next_deadline=next_at if advance else None,
                    )
                if not advancing:  # the plain delete of one-shot messages
                    del self._rows[claim[0]]
                    continue
                if self._cancels.get(row.id, now) > now:  # cancelled while claimed: it wins
                    del self._rows[claim[0]]
                    continue
                if row.readied_at is not None and row.enqueued_at > row.readied_at:
                    row.readied_at = row.readied_by = None  # replaced while claimed: given back
                    continue
                if next_at is None or row.recurrence is None:
                    del self._rows[claim[0]]
                    continue
                row.deadline, row.readied_at, row.readied_by = next_at, None, None
                row.attempts, row.last_error = 0, None
            return done

    def release(
        self,
        node_id: str,
        claims: Sequence[Claim],
        *,
        failed: bool,
        errors: Sequence[str] | None = None,
        park_attempts: int | None = None,
    ) -> dict[str, int]:
        if not claims:
            return {}
        with self._lock:
            now = self._statement("release_claims")
            node = check_uuid(node_id, "release_claims")
            padded: list[str | None] = list(errors) if errors is not None else []
            padded += [None] * (len(claims) - len(padded))
            for error in padded:
                if error is not None and len(error) > _LAST_ERROR_LENGTH:
                    raise refused(
                        "release_claims failed: value too long for type character varying(500)"
                    )
            released: dict[str, int] = {}
            for claim, error in zip(claims, padded, strict=False):
                row = self._fenced(node, claim)
                if row is None or self._cancel_wins(row, now):
                    continue
                row.readied_at = None
                row.readied_by = None
                if failed:
                    row.attempts += 1
                    if (
                        row.parked_at is None
                        and park_attempts is not None
                        and row.attempts >= park_attempts
                    ):
                        row.parked_at = now
                if error is not None:
                    row.last_error = error
                released[row.id] = row.attempts
            return released

    def park_exhausted(self, park_attempts: int) -> int:
        with self._lock:
            now = self._statement("park_exhausted")
            rows = [
                r for r in self._rows.values() if r.parked_at is None and r.parked(park_attempts)
            ]
            for row in rows:
                row.parked_at = now
            return len(rows)

    def ping(self) -> datetime:
        with self._lock:
            return self._statement("ping")

    def _cancel_wins(self, row: StoredRow, now: datetime) -> bool:
        """A claimed row whose message was cancelled meanwhile (a live cancel marker) is
        deleted when its claim ends, not given back (the caller holds the lock)."""
        if self._cancels.get(row.id, now) <= now:
            return False
        del self._rows[row.id]
        self._ended(row, now, CANCELLED, reason="cancelled while claimed")
        return True

    def close(self) -> None:
        self.closed = True


def unfenced(node_id: str, window_ms: int = 5000) -> Leadership:
    """A lease that never ends (for tests of the loops that are not about the fence)."""
    leadership = Leadership(node_id, window_ms)
    leadership.renew(math.inf)
    return leadership
