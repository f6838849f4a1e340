"""Postgres sessions of a store: one connection per thread, the session settings, and running
one named statement (timed, retried once Postgres broke a deadlock, driver errors translated to
StoreError).

``PostgresSession`` is the base of ``chronos.store.PostgresStore``: the statements themselves are in
``chronos.store.postgres.store`` (hot path), ``admin`` and ``leadership``.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row, tuple_row

from chronos.errors import StoreError
from chronos.observability import metrics
from chronos.observability.dependencies import postgres
from chronos.store.postgres.sql import query

log = logging.getLogger("chronos.store.postgres")  # the store's logger, one for its modules
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


DATABASE_TLS_REQUIRED = "Postgres accepts only TLS connections from here (sslmode)"
DATABASE_ACCESS_REFUSED = "Postgres refused the role or its password"
DATABASE_MISSING = "the database or role does not exist"
DATABASE_TLS_FAILED = "the TLS connection to Postgres failed (sslmode, sslrootcert, host name)"
DATABASE_URL_INVALID = "the database URL is not valid"
"""Why Postgres refused a connection, in Chronos's words: the start of the message of a
connection that the operator must fix (CHRONOS_DATABASE_URL), whatever libpq's after it."""

REFUSED_CONNECTION = (
    ("no encryption", DATABASE_TLS_REQUIRED),  # after "no pg_hba.conf entry ..."
    ("authentication failed", DATABASE_ACCESS_REFUSED),
    ("no pg_hba.conf entry", DATABASE_ACCESS_REFUSED),
    ("permission denied", DATABASE_ACCESS_REFUSED),
    ("does not exist", DATABASE_MISSING),
    ("certificate verify failed", DATABASE_TLS_FAILED),
    ("does not match host name", DATABASE_TLS_FAILED),
    ("root certificate file", DATABASE_TLS_FAILED),
    ("does not support ssl", DATABASE_TLS_FAILED),
    ("certificate file", DATABASE_TLS_FAILED),
    ("invalid connection option", DATABASE_URL_INVALID),
    ("invalid sslmode", DATABASE_URL_INVALID),
)
"""Words of a failed connection that the operator must fix (credentials, database name, TLS),
and what Chronos calls each: such a failure is not an outage. Anything else (refused, reset,
timed out, the server starting or shutting down, a name that does not resolve yet) is one, and
is waited for. Checked in order: the first found names it."""

STATEMENT_CANCELLED = (
    "the statement was cancelled: it ran past CHRONOS_STATEMENT_TIMEOUT_MS, "
    "or an operator cancelled it"
)
"""The start of a store error whose statement Postgres cancelled (SQLSTATE 57014)."""
QUERY_CANCELED = "57014"


def connection_refusal(exc: psycopg.Error) -> str | None:
    """Why a failed connection attempt is the settings' fault (one of the DATABASE_* reasons);
    None if it means the server is away."""
    text = str(exc).lower()
    return next((why for words, why in REFUSED_CONNECTION if words in text), None)


def unreachable(exc: psycopg.Error) -> bool:
    """Whether a failed connection attempt means the server is away (not a setting's fault)."""
    return connection_refusal(exc) is None


def libpq_url(url: str) -> str:
    """psycopg wants a libpq URL; accept the SQLAlchemy dialect spelling too."""
    if url.startswith("postgresql+psycopg://"):
        return "postgresql://" + url[len("postgresql+psycopg://") :]
    return url


class PostgresSession:
    """Connections and statement execution. Thread-safe: each thread gets its own connection
    (one per loop)."""

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
        shard: int | None = None,
    ):
        """``statement_timeout_ms`` and ``synchronous_commit`` (0 / empty: the server's
        settings) apply to every session; ``tcp_timeout_ms`` drops a connection whose peer stops
        answering (TCP keepalives and tcp_user_timeout) instead of waiting for minutes.
        ``shard``: the shard whose database this is (None: the one database), whose state its
        outages and returns report (``chronos.observability.dependencies``)."""
        self._url = libpq_url(url)
        self._dependency = postgres(shard)
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
            refused = connection_refusal(exc)
            if refused is not None:
                raise StoreError(f"cannot connect to Postgres: {refused}: {exc}") from exc
            self._dependency.failed(exc)
            raise StoreError(f"cannot connect to Postgres: {exc}", outage=True) from exc
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
        time the result arrived (its rows decoded)."""
        rows, _, arrived = self._execute_timed(name, params)
        return rows, arrived

    def _execute_timed(
        self, name: str, params: dict[str, Any]
    ) -> tuple[list[tuple[Any, ...]], float, float]:
        """``_execute_tuples`` with the monotonic time the statement was sent besides."""

        def run(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            with conn.cursor(row_factory=tuple_row, binary=True) as cur:
                cur.execute(query(name), params)
                return cur.fetchall()

        return self._run_timed(name, run)

    def _run(self, name: str, run: Callable[[psycopg.Connection[Any]], _T]) -> tuple[_T, float]:
        """``_run_timed`` without the time the statement was sent."""
        result, _, arrived = self._run_timed(name, run)
        return result, arrived

    def _run_timed(
        self, name: str, run: Callable[[psycopg.Connection[Any]], _T]
    ) -> tuple[_T, float, float]:
        """Run one statement: time it (a slow one is counted and logged, a running one shows
        in a gauge), retry it when Postgres broke a deadlock by aborting it (the statement is
        its own transaction, so running it again is safe). Returns the result and the
        monotonic times the statement (its last attempt) was sent and its result arrived."""
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
            self._dependency.succeeded()
            return result, started, time.monotonic()

    def _utility(self, name: str) -> None:
        """Run ``name``, a statement that cannot be prepared (VACUUM), on this thread's
        connection as its own transaction, outside the statement timings and the running
        statement's gauge: its time follows the table's size, it is no stuck statement."""
        conn = self._conn()
        try:
            conn.execute(query(name), prepare=False)
        except psycopg.Error as exc:
            raise self._translate(conn, name, exc) from exc
        self._dependency.succeeded()

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
            self._dependency.failed(exc)
            why = f"{STATEMENT_CANCELLED}: " if exc.sqlstate == QUERY_CANCELED else ""
            return StoreError(f"{name} failed: {why}{exc}", outage=True)
        # Class 22 (data exception) and 23 (integrity) name the data: a retry cannot succeed.
        # Class 54 (program limit exceeded: e.g. a batch over the JSON size limit) too.
        refused = (exc.sqlstate or "")[:2] in ("22", "23", "54")
        # Class 42: a missing grant or table; retried (a grant may come), but said as such.
        forbidden = (exc.sqlstate or "")[:2] == "42"
        return StoreError(
            f"{name} failed: {exc}",
            retryable=not refused,
            refused=forbidden,
            sqlstate=exc.sqlstate,
        )

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
            with contextlib.suppress(psycopg.Error):
                conn.close()

    def ping(self) -> datetime:
        now: datetime = self._execute("ping", {})[0]["now"]
        return now

    def release_thread_connection(self) -> None:
        """Close the calling thread's connection, if any: for short-lived threads (one HTTP
        request each), which would otherwise leave one open connection behind apiece."""
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None:
            return
        with contextlib.suppress(psycopg.Error):
            self._drop_connection(conn)
