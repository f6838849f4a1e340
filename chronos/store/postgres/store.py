"""The Postgres store: ``PostgresStore`` and its hot-path statements (enqueue, claim,
delete/release, failure detection).

Every method is one statement, hence one transaction, whatever the number of messages: the hot
path never costs a round trip per message. Sessions and driver errors (translated to StoreError)
are ``PostgresSession``'s (``chronos.store.postgres.session``); the admin and monitoring
statements are ``AdminQueries`` (``admin``), leadership ``LeadershipQueries``
(``leadership``); the SQL is ``sql/*.sql``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from chronos.errors import StoreError
from chronos.protocol import Action, ScheduledMessage
from chronos.store.batch import (
    ENQUEUE_CHUNK_BYTES,
    chunks_by_size,
    encode_batch,
    encoded_bytes,
)
from chronos.store.flow import Catchup, PauseSet
from chronos.store.history import Ending
from chronos.store.moves import PartitionMove
from chronos.store.postgres.admin import AdminQueries
from chronos.store.postgres.clock import ClockOffset
from chronos.store.postgres.find import FindQueries
from chronos.store.postgres.flow import FlowQueries
from chronos.store.postgres.history import HistoryQueries, history_params
from chronos.store.postgres.leadership import LeadershipQueries
from chronos.store.postgres.session import SLOW_STATEMENT_S, PostgresSession
from chronos.store.types import (
    DEFAULT_CANCEL_TTL_MS,
    FAIR_TENANTS_PER_CLAIM,
    KNOWN_TENANTS_MEMORY,
    KNOWN_TENANTS_TTL_S,
    UNBOUNDED_BYTES,
    Advance,
    Claim,
    ClaimedRow,
    Outcome,
    StuckRow,
)


class PostgresStore(
    PostgresSession, HistoryQueries, AdminQueries, FindQueries, LeadershipQueries, FlowQueries
):
    """Postgres Store. Thread-safe: each thread gets its own connection (one per loop).
    (``HistoryQueries`` before the other parts: its ``_recording_rows`` is the one they call.)"""

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float = 5.0,
        application_name: str = "chronos",
        slow_statement_s: float = SLOW_STATEMENT_S,
        statement_timeout_ms: int = 0,
        tcp_timeout_ms: int = 0,
        synchronous_commit: str = "",
        history: bool = True,
        shard: int | None = None,
    ):
        """The session options are ``PostgresSession``'s; ``history``: the statements that end
        messages record them (CHRONOS_HISTORY_TTL not 0)."""
        super().__init__(
            url,
            connect_timeout=connect_timeout,
            application_name=application_name,
            slow_statement_s=slow_statement_s,
            statement_timeout_ms=statement_timeout_ms,
            tcp_timeout_ms=tcp_timeout_ms,
            synchronous_commit=synchronous_commit,
            shard=shard,
        )
        self._known_tenants: set[str] = set()  # written to chronos_tenants by this store
        self._known_since = time.monotonic()  # forgotten every KNOWN_TENANTS_TTL_S (pruning)
        self.fair_tenants_per_claim = FAIR_TENANTS_PER_CLAIM
        self._fair_cursor = ""  # the last tenant the previous fair claim visited
        self._clock = ClockOffset()  # the claims' clocks (the firing thread's alone)
        self.history = history

    def _forget_known_tenants(self) -> None:
        self._known_tenants.clear()

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
        """Apply a batch of schedules, reschedules and cancels (ids must be distinct within the
        batch). One statement."""
        if not messages:
            return []
        outcomes = [Outcome.INSERTED] * len(messages)
        whole = _encoded(messages, partitions)
        if encoded_bytes(whole) <= ENQUEUE_CHUNK_BYTES:
            ranges = [(0, len(messages))]  # an ordinary batch: one statement
        else:
            ranges = chunks_by_size(messages, ENQUEUE_CHUNK_BYTES)
        for start, end in ranges:
            chunk = messages[start:end]
            encoded = (
                whole
                if len(ranges) == 1
                else _encoded(chunk, partitions[start:end] if partitions else None)
            )
            if time.monotonic() - self._known_since > KNOWN_TENANTS_TTL_S:
                # The leader forgets tenants with nothing waiting (prune_tenants): write ours
                # again now and then (no-ops while they are known), so an active one comes back.
                self._known_tenants.clear()
                self._known_since = time.monotonic()
            new_tenants = {m.tenant for m in chunk if m.action is not Action.CANCEL}
            new_tenants -= self._known_tenants
            # A cancel or a reschedule ends a waiting message: recorded in the same statement. A
            # chunk of schedules alone records nothing, and runs without the history's part (its
            # planning costs every statement, the session's plans being custom).
            ending = sum(m.action is not Action.SCHEDULE for m in chunk)
            rows, _ = self._recording(
                "enqueue_batch",
                {
                    **encoded,
                    "advance_ms": advance_ms,
                    "cancel_ttl_ms": cancel_ttl_ms,
                    "output_topic": output_topic,
                    "catchup_after_ms": catchup_after_ms,
                    "new_tenants": sorted(new_tenants),
                    "fenced": fenced,
                },
                records=ending,
                recording=ending > 0,
            )
            if len(self._known_tenants) + len(new_tenants) > KNOWN_TENANTS_MEMORY:
                self._known_tenants.clear()  # bounded memory: written again, as no-ops
            self._known_tenants |= new_tenants
            for ordinal, outcome in rows:
                outcomes[start + ordinal - 1] = Outcome(outcome)
        return outcomes

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
        """Claim due rows oldest first (``claim_due``), or, when ``fair`` or a tenant is
        excluded, shared between the tenants with due rows (``claim_due_fair``; then
        ``exclude_tenants`` are not claimed at all). With a paced ``catchup`` the claim is always
        ``claim_due`` (the overdue rows counted apart; tenants are not shared)."""
        params: dict[str, Any] = {
            "node_id": node_id,
            "horizon_ms": horizon_ms,
            "limit": limit,
            "park_attempts": park_attempts,
            "max_bytes": max_bytes,
            "first_always": first_always,
            "paused_tenants": sorted(paused.tenants) if paused else [],
            "paused_topics": sorted(paused.topics) if paused else [],
            "max_lateness_ms": max_lateness_ms,
            "catchup_after_ms": catchup.after_ms if catchup else None,
            "catchup_limit": catchup.limit if catchup else 0,
        }
        if catchup or (not fair and not exclude_tenants):
            rows, sent, arrived = self._execute_timed("claim_due", params)
        else:
            params |= {
                "cursor": self._fair_cursor,
                "tenants": max(1, min(self.fair_tenants_per_claim, limit)),
                "exclude_tenants": list(exclude_tenants),
                "fill": not exclude_tenants,
            }
            rows, sent, arrived = self._execute_timed("claim_due_fair", params)
            self._fair_cursor = next(r[11] for r in rows if r[0] is None)
            rows = [r for r in rows if r[0] is not None]
        rows.sort(key=lambda r: r[1])  # oldest first (RETURNING keeps no order)
        if not rows:
            return []
        # Each row's database time when it was read is its deadline minus what was left then.
        # Its timer starts from the clocks' offset (chronos.store.postgres.clock), not from this
        # statement's arrival: a slow claim no longer fires its batch late. The time left at the
        # arrival is the deadline minus the database clock at the arrival, as the offset has it.
        read = [r[1] - r[10] / 1000 for r in rows]
        clock_at_arrival = self._clock.observe(sent, arrived, min(read), max(read)) + arrived
        # One tuple per row, the headers zipped from the two arrays the statement decoded.
        return [
            ClaimedRow(
                id_,
                deadline,
                readied_at,
                key,
                value,
                list(zip(names, values, strict=True)) if names else [],
                attempts,
                last_error,
                topic,
                (deadline - clock_at_arrival) * 1000,
                arrived,
                tenant or "",
                recurrence,
                expires_ms,
            )
            for (
                id_,
                deadline,
                readied_at,
                key,
                value,
                names,
                values,
                attempts,
                last_error,
                topic,
                _read_remaining_ms,
                tenant,
                recurrence,
                expires_ms,
            ) in rows
        ]

    def several_tenants(self) -> bool:
        return bool(self._execute("several_tenants", {})[0]["several"])

    def delete_fired(
        self,
        node_id: str,
        claims: Sequence[Claim],
        nexts: Sequence[Advance] | None = None,
        ends: Sequence[Ending | None] | None = None,
    ) -> set[str]:
        """Delete fired rows; a batch with occurrences of series (``nexts`` given, even with no
        next occurrence at all: a series replaced while claimed is given back, never deleted)
        runs ``advance_fired`` (delete or advance) instead, so a batch of one-shot messages
        keeps the plain delete. With the history on, the same statement records each row's
        ``ends`` entry (None: no record; ``ends`` None: each one fired); a batch with no record
        at all runs without the history (no insert)."""
        if not claims:
            return set()
        params = statement_params("delete_fired", node_id, claims, ends=ends, history=self.history)
        recording = bool(params["history"])  # False: no entry of ``ends`` has a record
        if nexts is not None:
            if len(nexts) != len(claims):
                raise ValueError(f"{len(nexts)} next occurrences for {len(claims)} claims")
            params["nexts"] = list(nexts)
            rows, _ = self._recording("advance_fired", params, recording=recording)
        else:  # no dict per deleted row
            rows, _ = self._recording("delete_fired", params, recording=recording)
        return {r[0] for r in rows}

    def release(
        self,
        node_id: str,
        claims: Sequence[Claim],
        *,
        failed: bool,
        errors: Sequence[str] | None = None,
        park_attempts: int | None = None,
    ) -> dict[str, int]:
        """Give claims back; returns the attempts count of each row released. A failed row
        whose attempts reach ``park_attempts`` (None: never) is parked: out of the claim."""
        if not claims:
            return {}
        params = statement_params(
            "release_claims",
            node_id,
            claims,
            failed=failed,
            errors=errors,
            park_attempts=park_attempts,
        )
        rows = self._recording_rows("release_claims", params, records=0)
        return {r["id"]: r["attempts"] for r in rows}

    def release_node(self, node_id: str, since: datetime | None = None) -> int:
        """Release the claims of ``node_id`` made at or after ``since`` (None: all)."""
        params = {"node_id": node_id, "since": since}
        return len(self._recording_rows("release_node", params, records=0))

    def park_exhausted(self, park_attempts: int) -> int:
        """Park the unclaimed rows parked by their attempts alone (by a release that predates
        ``parked_at``), so they leave the claim's index; returns how many."""
        return len(self._execute("park_exhausted", {"park_attempts": park_attempts}))

    def find_stuck(
        self, hold_ms: int, limit: int, own: tuple[str, datetime | None] | None = None
    ) -> list[StuckRow]:
        """Claims older than the hold time, except ``own`` (node id, since: this process's)."""
        rows = self._execute(
            "find_stuck",
            {
                "hold_ms": hold_ms,
                "limit": limit,
                "own_node": own[0] if own else None,
                "own_since": own[1] if own else None,
            },
        )
        return [StuckRow(r["id"], r["readied_by"], r["readied_at"]) for r in rows]

    def partition_moves(self) -> list[PartitionMove]:
        rows, _ = self._execute_tuples("partition_moves", {})
        return [PartitionMove(*row) for row in rows]

    def reset_stuck(self, rows: Sequence[StuckRow]) -> list[tuple[str, str]]:
        if not rows:
            return []
        result = self._recording_rows("reset_stuck", _reset_params(rows), records=0)
        return [(r["id"], r["readied_by"]) for r in result]


def _encoded(
    messages: Sequence[ScheduledMessage], partitions: Sequence[int | None] | None = None
) -> dict[str, Any]:
    """The enqueue's parameters; a value that no column can hold (an integer out of its range,
    a string that is not UTF-8) is the database refusing the data: the caller isolates the
    message that carries it, as it does with what Postgres itself refuses."""
    try:
        return encode_batch(messages, partitions)
    except (struct.error, ValueError, TypeError, OverflowError) as exc:
        raise StoreError(f"enqueue_batch refused the batch's data: {exc}", retryable=False) from exc


def statement_params(
    name: str,
    node_id: str,
    claims: Sequence[Claim],
    *,
    failed: bool = False,
    errors: Sequence[str | None] | None = None,
    park_attempts: int | None = None,
    ends: Sequence[Ending | None] | None = None,
    history: bool = False,
) -> dict[str, Any]:
    """The parameters of a batch write on ``claims`` of ``node_id`` (``delete_fired``,
    ``release_claims`` or ``reset_stuck``), as the store sends them (the plan tests too): the
    ids and each claim's fence as arrays, claim by claim (see delete_fired; with ``history``,
    each claim's history record from ``ends``)."""
    ids = [c[0] for c in claims]
    readied_ats = [c[1] for c in claims]
    if name == "delete_fired":
        return {"node_id": node_id, "ids": ids, "readied_ats": readied_ats} | history_params(
            len(claims), ends, history
        )
    if name == "release_claims":
        errs = list(errors) if errors is not None else [None] * len(claims)
        if len(errs) != len(claims):
            raise ValueError(f"{len(errs)} errors for {len(claims)} claims")
        return {
            "node_id": node_id,
            "ids": ids,
            "readied_ats": readied_ats,
            "errors": errs,
            "failed": failed,
            "park_attempts": park_attempts,
            "history": history,
        }
    if name == "reset_stuck":
        return _reset_params([StuckRow(i, node_id, at) for i, at in claims])
    raise ValueError(f"not a batch write: {name}")


def _reset_params(rows: Sequence[StuckRow]) -> dict[str, Any]:
    return {
        "ids": [r.id for r in rows],
        "readied_ats": [r.readied_at for r in rows],
        "readied_bys": [r.readied_by for r in rows],
        "history": False,  # the store sends its own (``_recording_rows``)
    }
