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

    def _utility(self, name: str) -> None:
        raise NotImplementedError  # PostgresSession: a statement that cannot be prepared

    def _recording_rows(
        self, name: str, params: dict[str, Any], records: int
    ) -> list[dict[str, Any]]:
        raise NotImplementedError  # HistoryQueries: the statement, its history record too

    def elect_leader(self, window_ms: int) -> str | None:
        """The lowest node id whose heartbeat is younger than ``window_ms`` (database clock)."""
        rows = self._execute("elect_leader", {"window_ms": window_ms})
        return str(rows[0]["node_id"]) if rows else None

    def peers_delivering(self, node_id: str, within_ms: int) -> int:
        """How many other nodes had a record delivered within ``within_ms`` (their heartbeats'
        ``fired_at``)."""
        rows = self._execute("peers_delivering", {"node_id": node_id, "within_ms": within_ms})
        return int(rows[0]["peers"]) if rows else 0

    def reset_lapsed_claims(
        self, window_ms: int, node_id: str, limit: int
    ) -> list[tuple[str, str]]:
        """Reset up to ``limit`` claims of nodes whose heartbeat is older than ``window_ms``
        (never ``node_id``'s own); returns (message id, node) of the rows reset."""
        params = {"window_ms": window_ms, "node_id": node_id, "limit": limit}
        rows = self._recording_rows("reset_lapsed_claims", params, records=0)
        return [(r["id"], r["readied_by"]) for r in rows]

    def dead_messages(self) -> tuple[int, bool]:
        """The messages table's dead row versions (the statistics' count), and whether this
        role may vacuum it (MAINTAIN, or its owner)."""
        rows = self._execute("messages_dead_rows", {})
        return (int(rows[0]["dead"]), bool(rows[0]["may_vacuum"])) if rows else (0, False)

    def vacuum_messages(self) -> None:
        """VACUUM the messages table (SKIP_LOCKED, no ANALYZE) on this thread's connection,
        without a statement timeout."""
        self._execute("vacuum_session", {})
        self._utility("vacuum_messages")
