"""The Store interface and its Postgres implementation (the only module that talks SQL).

The hot path lives here (enqueue, claim, delete/release, failure detection); the admin and
monitoring statements and their records are in :mod:`chronos.store.postgres_admin`, inherited by
``PostgresStore`` and re-exported from here, like the interface and its values
(:mod:`chronos.store.types`).

Every method is one statement, hence one transaction, whatever the number of messages: the hot
path never costs a round trip per message. Driver errors are translated to StoreError here.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row, tuple_row

from chronos.errors import StoreError
from chronos.observability import metrics
from chronos.protocol import Action, ScheduledMessage
from chronos.store.batch import ENQUEUE_CHUNK_BYTES, chunks_by_size, encode_batch
from chronos.store.postgres_admin import (
    LIST_QUERIES,
    AdminQueries,
    Backlog,
    CancelOutcome,
    MessageRecord,
    NodeRecord,
    RequeueOutcome,
    RescheduleOutcome,
    TenantBacklog,
    TenantBacklogs,
)
from chronos.store.postgres_leadership import LeadershipQueries
from chronos.store.sql import query
from chronos.store.types import (
    DEFAULT_CANCEL_TTL_MS,
    FAIR_TENANTS_PER_CLAIM,
    KNOWN_TENANTS_MEMORY,
    UNBOUNDED_BYTES,
    Claim,
    ClaimedRow,
    Outcome,
    Store,
    StuckRow,
    row_bytes,
)

__all__ = [
    "row_bytes",
    "UNBOUNDED_BYTES",
    "KNOWN_TENANTS_MEMORY",
    "FAIR_TENANTS_PER_CLAIM",
    "DEFAULT_CANCEL_TTL_MS",
    "LIST_QUERIES",
    "Backlog",
    "CancelOutcome",
    "Claim",
    "ClaimedRow",
    "MessageRecord",
    "NodeRecord",
    "Outcome",
    "PostgresStore",
    "RequeueOutcome",
    "RescheduleOutcome",
    "Store",
    "StuckRow",
    "TenantBacklog",
    "TenantBacklogs",
    "encode_batch",
    "libpq_url",
    "session_options",
    "statement_params",
]

log = logging.getLogger(__name__)
_T = TypeVar("_T")


SLOW_STATEMENT_S = 1.0
"""A statement running longer than this is counted (chronos_slow_statements_total) and logged."""
DEADLOCK_DETECTED = "40P01"
DEADLOCK_RETRIES = 5
SESSION_SETTINGS = "-c plan_cache_mode=force_custom_plan -c TimeZone=UTC"
"""Every node session: plan each execution with its actual parameters and the table's current
size (a generic plan is cached from whatever the table looked like when first executed, and
estimates every array at 10 elements); and UTC, so no deadline is ever rendered in a local time
zone (year 9999 east of UTC is year 10000). Sent in the start-up packet: no extra round trip."""


def session_options(url: str) -> str:
    """libpq ``options`` for a node session: the URL's own, then SESSION_SETTINGS."""
    own = str(conninfo_to_dict(url).get("options") or "")
    return f"{own} {SESSION_SETTINGS}".strip()


def libpq_url(url: str) -> str:
    """psycopg wants a libpq URL; accept the SQLAlchemy dialect spelling too."""
    if url.startswith("postgresql+psycopg://"):
        return "postgresql://" + url[len("postgresql+psycopg://") :]
    return url


class PostgresStore(AdminQueries, LeadershipQueries):
    """Postgres Store. Thread-safe: each thread gets its own connection (one per loop)."""

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
    ):
        """``statement_timeout_ms`` and ``synchronous_commit`` (0 / empty: the server's
        settings) apply to every session; ``tcp_timeout_ms`` drops a connection whose peer stops
        answering (TCP keepalives and tcp_user_timeout) instead of waiting for minutes."""
        self._url = libpq_url(url)
        self._connect_timeout = connect_timeout
        self._application_name = application_name
        self._slow_statement_s = slow_statement_s
        self._running: dict[object, float] = {}  # statements under way: their start (monotonic)
        self._session = {
            "statement_timeout": str(statement_timeout_ms) if statement_timeout_ms else "",
            "synchronous_commit": synchronous_commit,
        }
        self._tcp: dict[str, Any] = {}
        if tcp_timeout_ms:
            seconds = max(3, tcp_timeout_ms // 1000)
            self._tcp = {
                "keepalives": 1,
                "keepalives_idle": max(1, seconds // 2),
                "keepalives_interval": max(1, seconds // 6),
                "keepalives_count": 3,
                "tcp_user_timeout": tcp_timeout_ms,
            }
        self._local = threading.local()
        self._all: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._known_tenants: set[str] = set()  # written to chronos_tenants by this store
        self.fair_tenants_per_claim = FAIR_TENANTS_PER_CLAIM
        self._fair_cursor = ""  # the last tenant the previous fair claim visited

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
                options=session_options(self._url),
                **self._tcp,
            )
            if any(self._session.values()):
                conn.execute(query("configure_session"), self._session)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to Postgres: {exc}") from exc
        conn.prepare_threshold = 0  # prepare every statement on first use
        self._local.conn = conn
        with self._lock:
            self._all.append(conn)
        return conn

    def _execute(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        def run(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
            with conn.cursor() as cur:
                cur.execute(query(name), params)
                return cur.fetchall() if cur.description is not None else []

        return self._run(name, run)[0]

    def _execute_tuples(
        self, name: str, params: dict[str, Any]
    ) -> tuple[list[tuple[Any, ...]], float]:
        """Hot-path variant: binary results, plain tuples (no per-row dict), and the monotonic
        time the result arrived (before any row is converted)."""

        def run(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            with conn.cursor(row_factory=tuple_row, binary=True) as cur:
                cur.execute(query(name), params)
                return cur.fetchall()

        return self._run(name, run)

    def _run(self, name: str, run: Callable[[psycopg.Connection[Any]], _T]) -> tuple[_T, float]:
        """Run one statement: time it (a slow one is counted and logged, a running one shows
        in a gauge), retry it when Postgres broke a deadlock by aborting it (the statement is
        its own transaction, so running it again is safe). Returns the result and the
        monotonic time it arrived."""
        attempt = 0
        while True:
            conn = self._conn()
            token = object()
            started = time.monotonic()
            self._running[token] = started
            try:
                result = run(conn)
            except psycopg.Error as exc:
                if exc.sqlstate == DEADLOCK_DETECTED and attempt < DEADLOCK_RETRIES:
                    attempt += 1
                    metrics.DEADLOCK_RETRIES.labels(name).inc()
                    log.warning(
                        "%s was chosen as a deadlock victim; retrying (%d/%d)",
                        name,
                        attempt,
                        DEADLOCK_RETRIES,
                        extra={"event": "deadlock_retry", "statement": name},
                    )
                    time.sleep(random.uniform(0.001, 0.01) * attempt)
                    continue
                raise self._translate(conn, name, exc) from exc
            finally:
                del self._running[token]
                self._observe(name, time.monotonic() - started)
            return result, time.monotonic()

    def _observe(self, name: str, seconds: float) -> None:
        if seconds < self._slow_statement_s:
            return
        metrics.SLOW_STATEMENTS.labels(name).inc()
        log.warning(
            "statement %s took %.3f s",
            name,
            seconds,
            extra={"event": "slow_statement", "statement": name, "seconds": round(seconds, 3)},
        )

    def longest_running_s(self) -> float:
        """Age of the oldest statement running now on any of this store's connections."""
        oldest = min(self._running.values(), default=None)
        return 0.0 if oldest is None else max(0.0, time.monotonic() - oldest)

    def _translate(
        self, conn: psycopg.Connection[Any], name: str, exc: psycopg.Error
    ) -> StoreError:
        """Driver error -> StoreError; drop a broken connection so the next call reconnects."""
        lost = (
            conn.closed
            or conn.broken
            or isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)
        )
        if lost:
            self._drop_connection(conn)
        # Class 22 (data exception) and 23 (integrity) name the data: a retry cannot succeed.
        # Class 54 (program limit exceeded: e.g. a batch over the JSON size limit) too.
        refused = not lost and (exc.sqlstate or "")[:2] in ("22", "23", "54")
        return StoreError(f"{name} failed: {exc}", retryable=not refused)

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

    def enqueue(
        self,
        messages: Sequence[ScheduledMessage],
        advance_ms: int,
        cancel_ttl_ms: int = DEFAULT_CANCEL_TTL_MS,
    ) -> list[Outcome]:
        """Apply a batch of schedules, reschedules and cancels (ids must be distinct within the
        batch). One statement."""
        if not messages:
            return []
        outcomes = [Outcome.INSERTED] * len(messages)
        for start, end in chunks_by_size(messages, ENQUEUE_CHUNK_BYTES):
            chunk = messages[start:end]
            new_tenants = {m.tenant for m in chunk if m.action is not Action.CANCEL}
            new_tenants -= self._known_tenants
            rows, _ = self._execute_tuples(
                "enqueue_batch",
                {
                    **encode_batch(chunk),
                    "advance_ms": advance_ms,
                    "cancel_ttl_ms": cancel_ttl_ms,
                    "new_tenants": sorted(new_tenants),
                },
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
    ) -> list[ClaimedRow]:
        """Claim due rows oldest first (``claim_due``), or, when ``fair`` or a tenant is
        excluded, shared between the tenants with due rows (``claim_due_fair``; then
        ``exclude_tenants`` are not claimed at all)."""
        params: dict[str, Any] = {
            "node_id": node_id,
            "horizon_ms": horizon_ms,
            "limit": limit,
            "park_attempts": park_attempts,
            "max_bytes": max_bytes,
            "first_always": first_always,
        }
        if not fair and not exclude_tenants:
            rows, arrived = self._execute_tuples("claim_due", params)
        else:
            params |= {
                "cursor": self._fair_cursor,
                "tenants": max(1, min(self.fair_tenants_per_claim, limit)),
                "exclude_tenants": list(exclude_tenants),
                "fill": not exclude_tenants,
            }
            rows, arrived = self._execute_tuples("claim_due_fair", params)
            self._fair_cursor = next(r[11] for r in rows if r[0] is None)
            rows = [r for r in rows if r[0] is not None]
        rows.sort(key=lambda r: r[1])  # oldest first (RETURNING keeps no order)
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
                remaining_ms,
                arrived,
                tenant or "",
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
                remaining_ms,
                tenant,
            ) in rows
        ]

    def several_tenants(self) -> bool:
        return bool(self._execute("several_tenants", {})[0]["several"])

    def delete_fired(self, node_id: str, claims: Sequence[Claim]) -> set[str]:
        if not claims:
            return set()
        params = statement_params("delete_fired", node_id, claims)
        rows, _ = self._execute_tuples("delete_fired", params)  # no dict per deleted row
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
        rows = self._execute("release_claims", params)
        return {r["id"]: r["attempts"] for r in rows}

    def release_node(self, node_id: str, since: datetime | None = None) -> int:
        """Release the claims of ``node_id`` made at or after ``since`` (None: all)."""
        return len(self._execute("release_node", {"node_id": node_id, "since": since}))

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

    def reset_stuck(self, rows: Sequence[StuckRow]) -> list[tuple[str, str]]:
        if not rows:
            return []
        result = self._execute("reset_stuck", _reset_params(rows))
        return [(r["id"], r["readied_by"]) for r in result]

    def ping(self) -> datetime:
        now: datetime = self._execute("ping", {})[0]["now"]
        return now

    def release_thread_connection(self) -> None:
        """Close the calling thread's connection, if any: for short-lived threads (one HTTP
        request each), which would otherwise leave one open connection behind apiece."""
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None:
            return
        try:
            self._drop_connection(conn)
        except psycopg.Error:
            pass


def statement_params(
    name: str,
    node_id: str,
    claims: Sequence[Claim],
    *,
    failed: bool = False,
    errors: Sequence[str | None] | None = None,
    park_attempts: int | None = None,
) -> dict[str, Any]:
    """The parameters of a batch write on ``claims`` of ``node_id`` (``delete_fired``,
    ``release_claims`` or ``reset_stuck``), as the store sends them (the plan tests too): the
    ids and each claim's fence as arrays, claim by claim (see delete_fired)."""
    ids = [c[0] for c in claims]
    readied_ats = [c[1] for c in claims]
    if name == "delete_fired":
        return {"node_id": node_id, "ids": ids, "readied_ats": readied_ats}
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
        }
    if name == "reset_stuck":
        return _reset_params([StuckRow(i, node_id, at) for i, at in claims])
    raise ValueError(f"not a batch write: {name}")


def _reset_params(rows: Sequence[StuckRow]) -> dict[str, Any]:
    return {
        "ids": [r.id for r in rows],
        "readied_ats": [r.readied_at for r in rows],
        "readied_bys": [r.readied_by for r in rows],
    }
