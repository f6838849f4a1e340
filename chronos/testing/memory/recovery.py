"""The in-memory store's failure recovery: a node's claims given back at its shutdown, and the
failure detector's stuck claims found and reset, with the semantics of the named SQL
(``release_node``, ``find_stuck``, ``reset_stuck``: a claim that ends is deleted when its message
was cancelled meanwhile)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime, timedelta

from chronos.store import StuckRow
from chronos.testing.memory.rows import StoredRow, check_uuid


class InMemoryRecovery:
    """``release_node``, ``find_stuck`` and ``reset_stuck`` of ``InMemoryStore``."""

    _lock: threading.RLock
    _rows: dict[str, StoredRow]

    def _statement(self, name: str) -> datetime:
        raise NotImplementedError  # InMemoryStore's bookkeeping

    def _cancel_wins(self, row: StoredRow, now: datetime) -> bool:
        raise NotImplementedError  # InMemoryStore's

    def release_node(self, node_id: str, since: datetime | None = None) -> int:
        with self._lock:
            now = self._statement("release_node")
            node = check_uuid(node_id, "release_node")
            count = 0
            for row in list(self._rows.values()):
                if row.readied_by == node and (
                    since is None or (row.readied_at is not None and row.readied_at >= since)
                ):
                    if self._cancel_wins(row, now):
                        continue
                    row.readied_at = None
                    row.readied_by = None
                    count += 1
            return count

    def find_stuck(
        self, hold_ms: int, limit: int, own: tuple[str, datetime | None] | None = None
    ) -> list[StuckRow]:
        with self._lock:
            now = self._statement("find_stuck")
            cutoff = now - timedelta(milliseconds=hold_ms)

            def own_claim(r: StoredRow) -> bool:
                if own is None or r.readied_by != own[0] or r.readied_at is None:
                    return False
                return own[1] is None or r.readied_at >= own[1]

            stuck = [
                r
                for r in self._rows.values()
                if r.readied_at is not None and r.readied_at < cutoff and not own_claim(r)
            ]
            stuck.sort(key=lambda r: r.readied_at or now)
            return [
                StuckRow(r.id, r.readied_by or "", r.readied_at or now)
                for r in stuck[: max(0, limit)]
            ]

    def reset_stuck(self, rows: Sequence[StuckRow]) -> list[tuple[str, str]]:
        if not rows:
            return []
        with self._lock:
            now = self._statement("reset_stuck")
            reset: list[tuple[str, str]] = []
            for stuck in rows:
                node = check_uuid(stuck.readied_by, "reset_stuck")
                row = self._rows.get(stuck.id)
                if row is None or row.readied_by != node or row.readied_at != stuck.readied_at:
                    continue
                if self._cancel_wins(row, now):
                    continue
                row.readied_at = None
                row.readied_by = None
                reset.append((row.id, node))
            return reset
