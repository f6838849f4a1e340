"""The Postgres side of flow control: pauses (``pause``, ``resume``, ``list_pauses``) and rate
limits (``set_limit``, ``clear_limit``, ``list_limits``).

A mixin of ``chronos.store.PostgresStore``; the SQL is in ``chronos/store/postgres/sql/`` and
runs through the store's ``_execute``, like every other query.
"""

from __future__ import annotations

from typing import Any

from chronos.store.flow import Limit, Pause, PauseKind


def _pause(row: dict[str, Any]) -> Pause:
    return Pause(PauseKind(row["kind"]), row["name"], row["paused_at"], row["paused_by"])


def _limit(row: dict[str, Any]) -> Limit:
    return Limit(
        PauseKind(row["kind"]), row["name"], row["per_second"], row["set_at"], row["set_by"]
    )


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

    def set_limit(self, kind: PauseKind, name: str, per_second: int, set_by: str) -> Limit:
        params = {"kind": kind.value, "name": name, "per_second": per_second, "set_by": set_by}
        return _limit(self._execute("set_limit", params)[0])

    def clear_limit(self, kind: PauseKind, name: str) -> Limit | None:
        rows = self._execute("clear_limit", {"kind": kind.value, "name": name})
        return _limit(rows[0]) if rows else None

    def limits(self) -> list[Limit]:
        return [_limit(r) for r in self._execute("list_limits", {})]
