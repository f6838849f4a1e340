"""The history of ended messages on the Postgres store: the statements that end messages record
them through ``_recording`` (a history that cannot be written never stops them), the records of
messages that end without a row (``record_ended``, intake's), the leader's
partition maintenance, and the admin API's reads (a message's records, a filtered page, a
summary). ``PostgresStore`` inherits them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import psycopg

from chronos.errors import StoreError
from chronos.observability import metrics
from chronos.store.arrays import bytea_array, int4_array, text_array, timestamptz_array
from chronos.store.filters import MessageFilter
from chronos.store.history import (
    REASON_LENGTH,
    EndedOnArrival,
    EndedRecord,
    Ending,
    HistorySummary,
    Maintenance,
    Partition,
    comment_ttl,
    days_to_create,
    ending_sequence,
    partition_day,
)

log = logging.getLogger(__name__)

_T = TypeVar("_T")

HISTORY_FAILURES = frozenset({"23514", "42P01", "42501"})
"""The errors of a history insert that must not stop the statement ending the messages: no
partition for the row (check_violation), no table, no grant. It runs again without the record."""
_WARN_EVERY_S = 60.0  # a history that cannot be written is logged once a minute


def history_params(
    count: int, ends: Sequence[Ending | None] | None, history: bool
) -> dict[str, Any]:
    """The history arrays of ``delete_fired`` / ``advance_fired``, claim by claim, all of fixed
    width (the statement reads them by the claim's position, O(1) each): the outcome, topic and
    reason as 1-based indexes into the few distinct names sent once (None: no record). Empty,
    and ``history`` false, without ``history`` or when no claim has a record (every one fired
    while CHRONOS_HISTORY_FIRED=false): the statement then reads none of them and inserts
    nothing, as with the history off."""
    entries = ending_sequence(ends, count) if history else []
    if all(e is None for e in entries):
        return {
            "history": False,
            "outcome_names": [],
            "outcome_ix": [],
            "topic_names": [],
            "topic_ix": [],
            "partitions": [],
            "offsets": [],
            "lateness": [],
            "reason_names": [],
            "reason_ix": [],
        }
    names: tuple[dict[str, int], dict[str, int], dict[str, int]] = ({}, {}, {})

    def index(kind: int, name: str | None) -> int | None:
        if name is None:
            return None
        table = names[kind]
        return table.setdefault(name[:REASON_LENGTH], len(table) + 1)

    outcome_ix = [index(0, e.outcome) if e else None for e in entries]
    topic_ix = [index(1, e.topic) if e else None for e in entries]
    reason_ix = [index(2, e.reason) if e else None for e in entries]
    return {
        "history": True,
        "outcome_names": list(names[0]),
        "outcome_ix": outcome_ix,
        "topic_names": list(names[1]),
        "topic_ix": topic_ix,
        "partitions": int4_array([e.partition if e else None for e in entries]),
        "offsets": [e.offset if e else None for e in entries],
        "lateness": int4_array([_int4(e.lateness_ms) if e else None for e in entries]),
        "reason_names": list(names[2]),
        "reason_ix": reason_ix,
    }


def ended_params(node_id: str, ended: Sequence[EndedOnArrival]) -> dict[str, Any]:
    """``record_ended``'s parameters: one binary array per column, record by record."""
    ends = [e.ending for e in ended]
    return {
        "node_id": node_id,
        "ids": text_array([e.id for e in ended]),
        "tenants": text_array([e.tenant for e in ended]),
        "outcomes": text_array([x.outcome for x in ends]),
        "deadlines": timestamptz_array([e.deadline for e in ended]),
        "topics": text_array([x.topic for x in ends]),
        "partitions": int4_array([x.partition for x in ends]),
        "offsets": [x.offset for x in ends],
        "lateness": int4_array([_int4(x.lateness_ms) for x in ends]),
        "attempts": int4_array(
            [None if e.attempt is None else min(e.attempt, 32767) for e in ended]
        ),
        "reasons": text_array(
            [None if x.reason is None else x.reason[:REASON_LENGTH] for x in ends]
        ),
        "recurring": [e.recurring for e in ended],
        "keys": bytea_array([e.key for e in ended]),
    }


def _int4(value: int | None) -> int | None:
    return None if value is None else max(-(2**31), min(2**31 - 1, value))


def ended_record(r: dict[str, Any]) -> EndedRecord:
    return EndedRecord(
        id=r["id"],
        tenant=r["tenant"],
        outcome=r["outcome"],
        deadline=r["deadline"],
        ended_at=r["ended_at"],
        topic=r["topic"],
        partition=r["kafka_partition"],
        offset=r["kafka_offset"],
        lateness_ms=r["lateness_ms"],
        node=r["node"],
        attempt=r["attempt"],
        reason=r["reason"],
        ended_by=r["ended_by"],
        next_deadline=r["next_deadline"],
        recurring=bool(r["recurring"]),
        key=None if r["message_key"] is None else bytes(r["message_key"]),
    )


class HistoryQueries:
    """The history's statements on ``PostgresStore``."""

    history: bool
    _warned_at = 0.0

    def _execute(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError  # PostgresStore runs the named statement

    def _execute_tuples(
        self, name: str, params: dict[str, Any]
    ) -> tuple[list[tuple[Any, ...]], float]:
        raise NotImplementedError

    def _run(self, name: str, run: Callable[[psycopg.Connection[Any]], _T]) -> tuple[_T, float]:
        raise NotImplementedError

    def ping(self) -> datetime:
        raise NotImplementedError

    # -- writing: the statements that end messages --------------------------------------------

    def _recording(
        self,
        name: str,
        params: dict[str, Any],
        records: int | None = None,
        *,
        recording: bool = True,
    ) -> tuple[list[tuple[Any, ...]], float]:
        """Run a statement that ends messages and records them (``_execute_tuples``); if the
        record cannot be written (``HISTORY_FAILURES``) run it again without it: the messages
        end all the same (firing wins over its history), ``chronos_history_unrecorded_total``
        counts the records lost (``records``: about how many; None: the statement's rows) and
        it is logged once a minute. Only then is there a second statement. ``recording``
        false: this run has nothing to record (``history_params``), it runs without the history
        whatever the store's."""
        result = self._recorded(name, params, self._execute_tuples, recording)
        if isinstance(result, StoreError):
            rows, arrived = self._execute_tuples(name, params | {"history": False})
            self._unrecorded(name, len(rows) if records is None else records, result)
            return rows, arrived
        return result

    def _recording_rows(
        self, name: str, params: dict[str, Any], records: int
    ) -> list[dict[str, Any]]:
        """``_recording`` of an admin statement (``_execute``)."""
        result = self._recorded(name, params, self._execute)
        if isinstance(result, StoreError):
            rows = self._execute(name, params | {"history": False})
            self._unrecorded(name, records, result)
            return rows
        return result

    def _recorded(
        self,
        name: str,
        params: dict[str, Any],
        execute: Callable[[str, dict[str, Any]], _T],
        recording: bool = True,
    ) -> _T | StoreError:
        """The statement's result, or the error of its history insert (any other is raised)."""
        history = self.history and recording
        try:
            return execute(name, params | {"history": history})
        except StoreError as exc:
            if not history or exc.sqlstate not in HISTORY_FAILURES:
                raise
            return exc

    def _unrecorded(self, name: str, lost: int, failure: StoreError) -> None:
        metrics.HISTORY_UNRECORDED.inc(lost)
        now = time.monotonic()
        if now - self._warned_at >= _WARN_EVERY_S:
            self._warned_at = now
            log.warning(
                "%s: %d ended messages not recorded in the history: %s",
                name,
                lost,
                failure,
                extra={"event": "history_unrecorded", "statement": name},
            )

    def record_ended(self, node_id: str, ended: Sequence[EndedOnArrival]) -> int:
        """The records of messages that ended without a row, in one statement (``record_ended``);
        how many were written. None while the history is off; a history that cannot be written
        (``HISTORY_FAILURES``: no partition for today, no table, no grant) is counted and logged
        as the statements that end stored messages do (0); any other error is raised."""
        if not ended or not self.history:
            return 0
        try:
            rows = self._execute("record_ended", ended_params(node_id, ended))
        except StoreError as exc:
            if exc.sqlstate not in HISTORY_FAILURES:
                raise
            self._unrecorded("record_ended", len(ended), exc)
            return 0
        return int(rows[0]["n"])

    # -- the leader's maintenance -------------------------------------------------------------

    def history_partitions(self, default_ttl: timedelta) -> tuple[datetime, list[Partition]]:
        """The database clock and the history's daily partitions (with the TTL each was created
        with; ``default_ttl`` when its comment says none)."""
        rows = self._execute("history_partitions", {})
        now = rows[0]["now"] if rows else self.ping()
        partitions = []
        for r in rows:
            day = partition_day(r["name"])
            if day is not None:
                partitions.append(Partition(day, comment_ttl(r["comment"], default_ttl)))
        return now, partitions

    def maintain_history(self, ttl: timedelta, *, at: datetime | None = None) -> Maintenance:
        """One round of the leader's maintenance: drop the partitions whose every record is
        past the TTL the partition was created with, and (``ttl`` not 0) create today's and the
        next days' with ``ttl`` (a TTL change applies to partitions created after it). ``at``:
        the instant to maintain for (None: the database clock). A partition that cannot be
        created or dropped is named in ``failed`` and tried again next round."""
        now, partitions = self.history_partitions(ttl)
        now = at or now
        created: list[str] = []
        dropped: list[str] = []
        failed_creates: list[str] = []
        failed_drops: list[str] = []
        for partition in partitions:
            if partition.ttl and partition.expired(now):
                try:
                    self._drop_partition(partition.name)
                    dropped.append(partition.name)
                except StoreError as exc:
                    failed_drops.append(partition.name)
                    log.warning("could not drop history partition %s: %s", partition.name, exc)
        if ttl > timedelta(0):
            existing = {p.day for p in partitions}
            for day in days_to_create(now):
                if day in existing:
                    continue
                partition = Partition(day, ttl)
                try:
                    self._create_partition(partition)
                    created.append(partition.name)
                except StoreError as exc:
                    failed_creates.append(partition.name)
                    log.warning("could not create history partition %s: %s", partition.name, exc)
        count = len(partitions) - len(dropped) + len(created)
        return Maintenance(created, dropped, failed_creates, failed_drops, count)

    def _create_partition(self, partition: Partition) -> None:
        ttl_ms = partition.ttl // timedelta(milliseconds=1)
        self._execute("create_history_partition", {"day": partition.day, "ttl_ms": ttl_ms})

    def _drop_partition(self, name: str) -> None:
        self._execute("drop_history_partition", {"name": name})

    # -- reading: the admin API ----------------------------------------------------------------

    def ended_messages(self, message_id: str, *, limit: int = 20) -> list[EndedRecord]:
        """A message's history records, newest first."""
        rows = self._execute("ended_message", {"id": message_id, "limit": limit})
        return [ended_record(r) for r in rows]

    def find_ended(
        self,
        where: MessageFilter,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        max_bytes: int | None = None,
    ) -> list[EndedRecord]:
        """Up to ``limit`` history records matching ``where`` (its state an outcome, or
        ``ended``: every outcome) in (deadline, id, ended_at) order, after the cursor, bounded
        by ``max_bytes`` of keys (``chronos.store.history.page_weight``)."""
        p = where.params()
        rows = self._execute(
            "find_ended",
            {
                "outcomes": list(where.outcomes),
                "tenant": p["tenant"],
                "topic": p["topic"],
                "id_like": p["id_like"],
                "key": p["key"],
                "key_exact": p["key_exact"],
                "key_low": p["key_low"],
                "key_high": p["key_high"],
                "deadline_from": p["deadline_from"],
                "deadline_to": p["deadline_to"],
                "recurring": p["recurring"],
                "after_deadline": after[0] if after else None,
                "after_id": after[1] if after else None,
                "limit": limit,
                "max_bytes": max_bytes,
            },
        )
        return [ended_record(r) for r in rows]

    def summarize_history(
        self,
        since: datetime,
        until: datetime | None = None,
        *,
        tenant: str | None = None,
        limit: int = 1000,
    ) -> list[HistorySummary]:
        """Counts by tenant and outcome of the records ended within [since, until)."""
        rows = self._execute(
            "summarize_history",
            {"since": since, "until": until, "tenant": tenant, "limit": limit},
        )
        return [
            HistorySummary(r["tenant"], r["outcome"], int(r["count"]), r["p50"], r["p99"])
            for r in rows
        ]

    def count_tenant_history(self, tenant: str, *, limit: int) -> int:
        """How many history records ``tenant`` has, counted up to ``limit``."""
        rows = self._execute("count_tenant_history", {"tenant": tenant, "limit": limit})
        return int(rows[0]["n"])

    def delete_tenant_history(self, tenant: str, *, batch: int) -> int:
        """Delete the records of up to ``batch`` of ``tenant``'s messages; how many went."""
        rows = self._execute("delete_tenant_history", {"tenant": tenant, "batch": batch})
        return int(rows[0]["n"])
