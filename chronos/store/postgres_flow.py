"""The Postgres side of flow control: pauses (``pause``, ``resume``, ``list_pauses``).

A mixin of ``chronos.store.PostgresStore``; the SQL is in ``chronos/store/sql/queries.sql`` and
runs through the store's ``_execute``, like every other query.
"""

from __future__ import annotations

from typing import Any

from chronos.store.flow import Pause, PauseKind


def _pause(row: dict[str, Any]) -> Pause:
    return Pause(PauseKind(row["kind"]), row["name"], row["paused_at"], row["paused_by"])


class FlowQueries:
    def _execute(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError  # provided by PostgresStore

    def pause(self, kind: PauseKind, name: str, paused_by: str) -> Pause:
        rows = self._execute("pause", {"kind": kind.value, "name": name, "paused_by": paused_by})
        return _pause(rows[0])

    def resume(self, kind: PauseKind, name: str) -> Pause | None:
        rows = self._execute("resume", {"kind": kind.value, "name": name})
        return _pause(rows[0]) if rows else None

    def pauses(self) -> list[Pause]:
        return [_pause(r) for r in self._execute("list_pauses", {})]
