"""The in-memory store's flow control: pauses, with the semantics of the SQL (``pause``,
``resume``, ``list_pauses``, and the claims' paused filter). A mixin of ``InMemoryStore``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from chronos.store import Pause, PauseKind, PauseSet
from chronos.testing.memory_rows import StoredRow


class InMemoryFlow:
    _lock: threading.RLock
    _pauses: dict[tuple[PauseKind, str], Pause]  # chronos_pauses
    _statement: Callable[[str], datetime]

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

    @staticmethod
    def _claimable(
        row: StoredRow, now: datetime, paused: PauseSet | None, max_lateness_ms: int | None
    ) -> bool:
        """Not paused, or past its expiry limit (claimed to be dead-lettered), as the claims'
        paused filter says."""
        if not paused or not paused.holds(row.tenant, row.target_topic):
            return True
        limit = row.expires_ms if row.expires_ms is not None else max_lateness_ms
        return limit is not None and row.deadline < now - timedelta(milliseconds=limit)
