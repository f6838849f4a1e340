"""The Store interface and its Postgres implementation (the only module that talks SQL).

Every method is one statement, hence one transaction, whatever the number of messages: the hot
path never costs a round trip per message. Driver errors are translated to StoreError here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Protocol

import psycopg
from psycopg.rows import dict_row

from chronos.errors import StoreError
from chronos.protocol import Headers, ScheduledMessage, decode_headers, encode_headers
from chronos.sql import query

log = logging.getLogger(__name__)


class Outcome(Enum):
    """What enqueueing did with one consumed message."""

    INSERTED = "inserted"  # waiting in the table
    DUPLICATE = "duplicate"  # its id is already waiting or ready: ignored
    FIRE_NOW = "fire_now"  # deadline lapsed and id unknown: publish directly
    DUE_DUPLICATE = "due_duplicate"  # deadline lapsed but id already waiting/ready: ignored


@dataclass(frozen=True, slots=True)
class ClaimedRow:
    id: str
    deadline: datetime
    readied_at: datetime
    key: bytes | None
    value: bytes | None
    headers: Headers
    attempts: int
    last_error: str | None
    target_topic: str | None
    remaining_ms: float  # deadline - now() on the database clock, at claim time


@dataclass(frozen=True, slots=True)
class StuckRow:
    id: str
    readied_by: str
    readied_at: datetime


Claim = tuple[str, datetime]  # (id, readied_at): the fence of one claim


class Store(Protocol):
    def enqueue(self, messages: Sequence[ScheduledMessage], advance_ms: int) -> list[Outcome]: ...

    def claim(
        self, node_id: str, horizon_ms: int, limit: int, park_attempts: int
    ) -> list[ClaimedRow]: ...

    def delete_fired(self, node_id: str, claims: Sequence[Claim]) -> set[str]: ...

    def release(
        self,
        node_id: str,
        claims: Sequence[Claim],
        *,
        failed: bool,
        errors: Sequence[str] | None = None,
    ) -> dict[str, int]: ...

    def release_node(self, node_id: str) -> int: ...

    def find_stuck(self, hold_ms: int, limit: int) -> list[StuckRow]: ...

    def reset_stuck(self, rows: Sequence[StuckRow]) -> list[tuple[str, str]]: ...

    def ping(self) -> datetime: ...

    def close(self) -> None: ...


def libpq_url(url: str) -> str:
    """psycopg wants a libpq URL; accept the SQLAlchemy dialect spelling too."""
    if url.startswith("postgresql+psycopg://"):
        return "postgresql://" + url[len("postgresql+psycopg://") :]
    return url


class PostgresStore:
    """Postgres Store. Thread-safe: each thread gets its own connection (one per loop)."""

    def __init__(self, url: str, *, connect_timeout: float = 5.0, application_name: str = "chronos"):
        self._url = libpq_url(url)
        self._connect_timeout = connect_timeout
        self._application_name = application_name
        self._local = threading.local()
        self._all: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()

    # -- connection management -------------------------------------------------------------

    def _conn(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed:
            return conn
        try:
            conn = psycopg.connect(
                self._url,
                autocommit=True,
                connect_timeout=max(1, int(self._connect_timeout)),
                application_name=self._application_name,
                row_factory=dict_row,
            )
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to Postgres: {exc}") from exc
        conn.prepare_threshold = 0  # prepare every statement on first use
        self._local.conn = conn
        with self._lock:
            self._all.append(conn)
        return conn

    def _execute(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        conn = self._conn()
        try:
            with conn.cursor() as cur:
                cur.execute(query(name), params)  # type: ignore[arg-type]
                return cur.fetchall() if cur.description is not None else []
        except psycopg.Error as exc:
            if conn.closed or conn.broken or isinstance(exc, psycopg.OperationalError):
                self._drop_connection(conn)
            raise StoreError(f"{name} failed: {exc}") from exc

    def _drop_connection(self, conn: psycopg.Connection[Any]) -> None:
        try:
            conn.close()
        finally:
            self._local.conn = None
            with self._lock:
                if conn in self._all:
                    self._all.remove(conn)

    def close(self) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            try:
                conn.close()
            except psycopg.Error:
                pass

    # -- the statements --------------------------------------------------------------------

    def enqueue(self, messages: Sequence[ScheduledMessage], advance_ms: int) -> list[Outcome]:
        """Insert a batch (ids must be distinct within the batch). One statement."""
        if not messages:
            return []
        rows = self._execute(
            "enqueue_batch",
            {
                "ids": [m.id for m in messages],
                "deadlines": [m.deadline for m in messages],
                "keys": [m.key for m in messages],
                "vals": [m.value for m in messages],
                "headers": [encode_headers(m.headers) for m in messages],
                "advance_ms": advance_ms,
            },
        )
        outcomes: list[Outcome] = []
        for row in rows:
            if row["due"]:
                outcomes.append(Outcome.DUE_DUPLICATE if row["existed"] else Outcome.FIRE_NOW)
            else:
                outcomes.append(Outcome.INSERTED if row["inserted"] else Outcome.DUPLICATE)
        return outcomes

    def claim(
        self, node_id: str, horizon_ms: int, limit: int, park_attempts: int
    ) -> list[ClaimedRow]:
        rows = self._execute(
            "claim_due",
            {
                "node_id": node_id,
                "horizon_ms": horizon_ms,
                "limit": limit,
                "park_attempts": park_attempts,
            },
        )
        return [
            ClaimedRow(
                id=r["id"],
                deadline=r["deadline"],
                readied_at=r["readied_at"],
                key=_bytes(r["message_key"]),
                value=_bytes(r["message_value"]),
                headers=decode_headers(r["message_headers"]),
                attempts=r["attempts"],
                last_error=r["last_error"],
                target_topic=r["target_topic"],
                remaining_ms=r["remaining_ms"],
            )
            for r in rows
        ]

    def delete_fired(self, node_id: str, claims: Sequence[Claim]) -> set[str]:
        if not claims:
            return set()
        rows = self._execute(
            "delete_fired",
            {
                "node_id": node_id,
                "ids": [c[0] for c in claims],
                "readied_ats": [c[1] for c in claims],
            },
        )
        return {r["id"] for r in rows}

    def release(
        self,
        node_id: str,
        claims: Sequence[Claim],
        *,
        failed: bool,
        errors: Sequence[str] | None = None,
    ) -> dict[str, int]:
        """Give claims back; returns the attempts count of each row released."""
        if not claims:
            return {}
        rows = self._execute(
            "release_claims",
            {
                "node_id": node_id,
                "ids": [c[0] for c in claims],
                "readied_ats": [c[1] for c in claims],
                "failed": failed,
                "errors": list(errors) if errors is not None else [None] * len(claims),
            },
        )
        return {r["id"]: r["attempts"] for r in rows}

    def release_node(self, node_id: str) -> int:
        return len(self._execute("release_node", {"node_id": node_id}))

    def find_stuck(self, hold_ms: int, limit: int) -> list[StuckRow]:
        rows = self._execute("find_stuck", {"hold_ms": hold_ms, "limit": limit})
        return [StuckRow(r["id"], r["readied_by"], r["readied_at"]) for r in rows]

    def reset_stuck(self, rows: Sequence[StuckRow]) -> list[tuple[str, str]]:
        if not rows:
            return []
        result = self._execute(
            "reset_stuck",
            {
                "ids": [r.id for r in rows],
                "readied_bys": [r.readied_by for r in rows],
                "readied_ats": [r.readied_at for r in rows],
            },
        )
        return [(r["id"], r["readied_by"]) for r in result]

    def ping(self) -> datetime:
        now: datetime = self._execute("ping", {})[0]["now"]
        return now


def _bytes(value: bytes | memoryview | None) -> bytes | None:
    if value is None:
        return None
    return bytes(value)
