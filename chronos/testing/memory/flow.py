"""How the in-memory store's claim picks rows beyond the deadline order, with the semantics of the
SQL: the fair share between tenants (``claim_due_fair``), pauses (``pause``, ``resume``,
``list_pauses`` and the claims' paused filter), the paced catch-up, and the partitions a shard
does not take while they move (``partition_moves``, the enqueue's fence). A mixin of
``InMemoryStore``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from chronos.protocol import ScheduledMessage
from chronos.store import Catchup, Limit, Pause, PauseKind, PauseSet
from chronos.store.moves import MOVING, PartitionMove
from chronos.testing.memory.rows import StoredRow


class InMemoryFlow:
    _lock: threading.RLock
    _tenants: set[str]
    _fair_cursor: str
    fair_tenants_per_claim: int
    _pauses: dict[tuple[PauseKind, str], Pause]  # chronos_pauses
    _limits: dict[tuple[PauseKind, str], Limit]  # chronos_limits
    _statement: Callable[[str], datetime]
    moves: list[PartitionMove]  # chronos_partition_moves (tests write it)
    shard: int  # chronos_shard's shard

    def partition_moves(self) -> list[PartitionMove]:
        with self._lock:
            self._statement("partition_moves")
            return list(self.moves)

    def _refused(self, partitions: Sequence[int | None] | None) -> set[int]:
        """The fence of ``enqueue_batch`` (chronos_partitions_refused): of ``partitions``, those
        this shard does not take now (being moved, or moved to another shard)."""
        with self._lock:
            refused = {
                m.partition for m in self.moves if m.state == MOVING or m.shard != self.shard
            }
        return refused & set(partitions or ())

    def pause(self, kind: PauseKind, name: str, paused_by: str) -> Pause:
        with self._lock:
            now = self._statement("pause")
            return self._pauses.setdefault((kind, name), Pause(kind, name, now, paused_by))

    def resume(self, kind: PauseKind, name: str) -> Pause | None:
        with self._lock:
            self._statement("resume")
            return self._pauses.pop((kind, name), None)

    def pauses(self) -> list[Pause]:
        with self._lock:
            self._statement("list_pauses")
            return sorted(self._pauses.values(), key=lambda p: (p.paused_at, p.kind.value, p.name))

    def set_limit(self, kind: PauseKind, name: str, per_second: int, set_by: str) -> Limit:
        with self._lock:
            now = self._statement("set_limit")
            self._limits[(kind, name)] = Limit(kind, name, per_second, now, set_by)
            return self._limits[(kind, name)]

    def clear_limit(self, kind: PauseKind, name: str) -> Limit | None:
        with self._lock:
            self._statement("clear_limit")
            return self._limits.pop((kind, name), None)

    def limits(self) -> list[Limit]:
        with self._lock:
            self._statement("list_limits")
            return sorted(self._limits.values(), key=lambda x: (x.kind.value, x.name))

    @staticmethod
    def _claimable(
        row: StoredRow, now: datetime, paused: PauseSet | None, max_lateness_ms: int | None
    ) -> bool:
        """Not paused, or a one-shot row past its expiry limit (claimed to be dead-lettered), as
        the claims' paused filter says: a paused series waits."""
        if not paused or not paused.holds(row.tenant, row.target_topic):
            return True
        if row.recurrence is not None:
            return False
        limit = row.expires_ms if row.expires_ms is not None else max_lateness_ms
        return limit is not None and row.deadline < now - timedelta(milliseconds=limit)

    def _held_by_flow(
        self,
        messages: Sequence[ScheduledMessage],
        now: datetime,
        output_topic: str,
        catchup_after_ms: int | None,
    ) -> set[str]:
        """The ids of an enqueued batch that flow control holds (stored even when due), as
        ``enqueue_batch``'s due test says: paused or limited, or paced by the catch-up."""
        held = set()
        names = set(self._pauses) | set(self._limits)
        for m in messages:
            topic = m.target_topic if m.target_topic is not None else output_topic
            if (
                (PauseKind.TENANT, m.tenant or "") in names
                or (PauseKind.TOPIC, topic) in names
                or (
                    catchup_after_ms is not None
                    and m.deadline <= now - timedelta(milliseconds=catchup_after_ms)
                )
            ):
                held.add(m.id)
        return held

    @staticmethod
    def _paced(
        due: list[StoredRow], now: datetime, catchup: Catchup, limit: int
    ) -> list[StoredRow]:
        """``claim_due`` with a paced catch-up: up to ``limit`` rows not overdue by more than
        ``catchup.after_ms``, and up to ``catchup.limit`` of those that are (``due``: oldest
        first)."""
        cut = now - timedelta(milliseconds=catchup.after_ms)
        overdue = [r for r in due if r.deadline <= cut][: catchup.limit]
        on_time = [r for r in due if r.deadline > cut][:limit]
        return sorted(overdue + on_time, key=lambda r: r.deadline)

    def _fair_share(
        self, due: list[StoredRow], with_due: set[str | None], limit: int, excluded: set[str]
    ) -> list[StoredRow]:
        """The rows ``claim_due_fair`` takes (``due``: oldest first): the next known tenants
        after the cursor (wrapping round), each with due rows its share of the batch, then,
        unless a tenant is excluded, the rest oldest first."""
        known = sorted(self._tenants)
        cursor = self._fair_cursor
        size = max(1, min(self.fair_tenants_per_claim, limit))
        window = ([t for t in known if t > cursor] + [t for t in known if t <= cursor])[:size]
        self._fair_cursor = window[-1] if window else cursor
        visited = [t for t in window if t not in excluded and t in with_due]
        share = max(1, limit // max(1, len(visited)))
        fair = [r for t in visited for r in [r for r in due if r.tenant == t][:share]]
        fair.sort(key=lambda r: (r.deadline, r.id))
        if excluded:
            return fair
        taken = {r.id for r in fair}
        return fair + [r for r in due if r.id not in taken][: limit - len(fair)]
