"""The Postgres side of leadership: the election and the takeover of a dead node's claims.

A mixin of ``chronos.store.PostgresStore`` (kept apart so the store module stays readable); the
SQL is in ``chronos/store/postgres/sql/`` (``elect_leader``, ``reset_lapsed_claims``) and runs
through
the store's ``_execute``, like every other query.
"""

from __future__ import annotations

from typing import Any


class LeadershipQueries:
    def _execute(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError  # provided by PostgresStore

    def elect_leader(self, window_ms: int) -> str | None:
        """The lowest node id whose heartbeat is younger than ``window_ms`` (database clock)."""
        rows = self._execute("elect_leader", {"window_ms": window_ms})
        return str(rows[0]["node_id"]) if rows else None

    def reset_lapsed_claims(
        self, window_ms: int, node_id: str, limit: int
    ) -> list[tuple[str, str]]:
        """Reset up to ``limit`` claims of nodes whose heartbeat is older than ``window_ms``
        (never ``node_id``'s own); returns (message id, node) of the rows reset."""
        rows = self._execute(
            "reset_lapsed_claims", {"window_ms": window_ms, "node_id": node_id, "limit": limit}
        )
        return [(r["id"], r["readied_by"]) for r in rows]
