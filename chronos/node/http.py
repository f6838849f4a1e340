"""The node's HTTP server: liveness, readiness and Prometheus metrics (admin API:
chronos.admin.api).

GET /health/live   200 while every loop thread runs and each made progress within the
                   liveness timeout (a loop stuck in a statement fails it)
GET /health/ready  200 while the loops run and are warm (intake has had its first group
                   assignment, firing's producer knows the output topic's leaders and the
                   first claim has run), Postgres answers and the broker answers (failures
                   show a short category; the detail goes to the log, never to the client)

The server is bounded: a fixed pool of worker threads serves the connections, a few more wait
in a short queue and any beyond it are closed at once; each connection gets a socket timeout
and a total deadline, so idle or trickling clients cannot exhaust the node.
GET /metrics       Prometheus text format
GET /console       the operator's console (chronos/node/console/index.html: static HTML and JS that
                   call the admin API with a token entered in the page)
/admin/v1/...      the admin API (off unless CHRONOS_ADMIN_TOKEN is set), see chronos.admin.api

With CHRONOS_ADMIN_PORT, the console and the admin API are served by a second server of their own
on that port (and answer 404 on the HTTP port, which keeps health and metrics alone), so that a
network policy can let a scraper reach the metrics without reaching the admin API.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import socket
import threading
import time
from functools import cache
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib import resources
from typing import Any

from confluent_kafka import KafkaException
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.registry import Collector

from chronos.admin.api import admin_routes
from chronos.config.settings import Settings
from chronos.errors import StoreError
from chronos.observability.dependencies import FLOW_CONTROL, KAFKA_WRITES
from chronos.store import Store

log = logging.getLogger(__name__)

READY_CACHE_SECONDS = 1.0
HTTP_WORKERS = 8  # connections served at once
HTTP_BACKLOG = 32  # accepted connections waiting for a worker; more are closed at once
HTTP_IDLE_TIMEOUT = 5.0  # seconds a connection may send nothing
HTTP_REQUEST_DEADLINE = 15.0  # seconds a connection may take in all


class Health:
    """Readiness checks, cached briefly so probes never hammer Postgres or the broker."""

    def __init__(self, settings: Settings, state: Any, store: Store):
        self.settings = settings
        self.state = state
        self.store = store
        self._lock = threading.Lock()
        self._checked_at = 0.0
        self._result: tuple[bool, dict[str, str]] = (False, {})

    def live(self) -> tuple[bool, dict[str, str]]:
        if self.state.waiting_for:  # start-up waits for a dependency: alive, not ready
            return True, {"loops": f"starting: waiting for {self.state.waiting_for}"}
        if not self.state.loops_alive():
            return False, {"loops": "stopped", "node": self.state.node_id}
        stalled = self.state.stalled_loops()
        if stalled:
            return False, {"loops": "stalled: " + ", ".join(stalled), "node": self.state.node_id}
        return True, {"loops": "running", "node": self.state.node_id}

    def ready(self) -> tuple[bool, dict[str, str]]:
        with self._lock:
            if time.monotonic() - self._checked_at < READY_CACHE_SECONDS:
                return self._result
            checks: dict[str, str] = {"node": self.state.node_id}
            ok = True
            if self.state.stopping:
                ok, checks["node_state"] = False, "stopping"
            if self.state.waiting_for:
                ok, checks["node_state"] = False, f"waiting for {self.state.waiting_for}"
            warming = self.state.warming_loops()
            if not self.state.loops_alive():
                ok, checks["loops"] = False, "stopped"
            elif warming:  # e.g. intake before its first assignment: not on time yet
                ok, checks["loops"] = False, "warming: " + ", ".join(warming)
            shards_away = getattr(self.store, "shards_away", None)
            try:
                if shards_away is not None:  # several shards: ready while one answers
                    away = shards_away()
                    if len(away) == len(self.store.stores):  # type: ignore[attr-defined]
                        raise StoreError("no shard's database answers", outage=True)
                    listed = ", ".join(map(str, away))
                    checks["postgres"] = f"shards away: {listed}" if away else "ok"
                else:
                    self.store.ping()
                    checks["postgres"] = "ok"
            except StoreError as exc:
                # The driver's text names the host, the user, sometimes part of a password:
                # the log gets it, the unauthenticated probe gets a category.
                log.log(
                    exc.log_level,
                    "readiness: Postgres check failed: %s",
                    exc,
                    extra={"event": "not_ready"},
                )
                ok, checks["postgres"] = False, "unavailable"
            if FLOW_CONTROL.down:
                ok, checks["flow_control"] = False, "pauses or limits unreadable"
            broker_ok, detail = broker_reachable(self.settings)
            if broker_ok and KAFKA_WRITES.down:
                # The broker answers but refuses the writes (too few in-sync replicas, ...).
                broker_ok, detail = False, "writes failing"
            checks["kafka"] = detail
            ok = ok and broker_ok
            self._result = (ok, checks)
            self._checked_at = time.monotonic()
            return self._result


def broker_reachable(settings: Settings) -> tuple[bool, str]:
    from confluent_kafka.admin import AdminClient

    from chronos.kafka import admin_config

    try:
        conf = admin_config(settings)
        metadata = AdminClient(conf).list_topics(topic=settings.output_topic, timeout=2)
        topic = metadata.topics.get(settings.output_topic)
        if topic is None or topic.error is not None:
            return False, "output topic missing"
        return True, "ok"
    except KafkaException as exc:
        # The outage itself is logged once by the broker probe (dependency_down).
        log.debug("readiness: Kafka check failed: %s", exc, extra={"event": "not_ready"})
        return False, "unavailable"


Route = Any  # (handler, method, path, query) -> (status, content_type, body[, headers]) | None


class _Handler(BaseHTTPRequestHandler):
    server: ChronosHTTPServer
    timeout = HTTP_IDLE_TIMEOUT  # socket timeout of each connection (StreamRequestHandler)

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.idle_timeout)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http: " + format, *args)

    def _send(
        self, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        if status != 204:
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if status != 204:
            self.wfile.write(body)

    def _dispatch(self, method: str) -> None:
        path, _, query = self.path.partition("?")
        try:
            for handler in self.server.routes:
                result = handler(self, method, path, query)
                if result is not None:
                    self._send(*result)
                    return
            self._send(404, "application/json", b'{"error": "not found"}')
        except Exception:
            log.exception("http handler failed for %s %s", method, path)
            self._send(500, "application/json", b'{"error": "internal error"}')
        finally:
            # Close the worker's database connection (if it opened one): the admin API is
            # rarely used, and an idle connection per worker would count against Postgres.
            release = getattr(self.server.store, "release_thread_connection", None)
            if release is not None:
                release()

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _other(self) -> None:
        self._dispatch(self.command)  # routes answer 405 (or 404) for methods they do not serve

    do_PUT = do_PATCH = do_OPTIONS = do_TRACE = do_QUERY = _other


class ChronosHTTPServer(HTTPServer):
    """An HTTP server with a bounded pool of workers (see the module docstring)."""

    routes: list[Route]
    store: Store | None = None
    # The admin API's own server (CHRONOS_ADMIN_PORT), stopped and closed with this one.
    admin: ChronosHTTPServer | None = None

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        name: str = "chronos-http",
        workers: int = HTTP_WORKERS,
        backlog: int = HTTP_BACKLOG,
        idle_timeout: float = HTTP_IDLE_TIMEOUT,
        deadline: float = HTTP_REQUEST_DEADLINE,
    ):
        # Set before binding: a bind that fails closes the server (server_close) at once.
        self.idle_timeout = idle_timeout
        self.deadline = deadline
        self._waiting: queue.Queue[tuple[socket.socket, Any] | None] = queue.Queue(backlog)
        self._serving: dict[socket.socket, float] = {}  # connection -> deadline (monotonic)
        self._serving_lock = threading.Lock()
        self._closed = threading.Event()
        self._workers: list[threading.Thread] = []
        super().__init__(address, handler)
        self._workers = [
            threading.Thread(target=self._work, name=f"{name}-{n}", daemon=True)
            for n in range(workers)
        ]
        for worker in self._workers:
            worker.start()
        self._reaper = threading.Thread(target=self._reap, name=f"{name}-reaper", daemon=True)
        self._reaper.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            self._waiting.put_nowait((request, client_address))
        except queue.Full:
            log.debug("http: every worker busy; closing a connection from %s", client_address)
            self.shutdown_request(request)

    def _work(self) -> None:
        while True:
            item = self._waiting.get()
            if item is None:
                return
            request, client_address = item
            with self._serving_lock:
                self._serving[request] = time.monotonic() + self.deadline
            try:
                self.finish_request(request, client_address)
            except Exception:  # noqa: BLE001 - as socketserver does: log it, serve the next
                self.handle_error(request, client_address)
            finally:
                with self._serving_lock:
                    self._serving.pop(request, None)
                self.shutdown_request(request)

    def _reap(self) -> None:
        """Cut connections past their deadline (a client trickling bytes to hold a worker)."""
        while not self._closed.wait(0.5):
            now = time.monotonic()
            with self._serving_lock:
                late = [conn for conn, deadline in self._serving.items() if deadline < now]
            for conn in late:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)  # the worker's blocked read returns

    def shutdown(self) -> None:
        super().shutdown()
        if self.admin is not None:
            self.admin.shutdown()

    def server_close(self) -> None:
        super().server_close()
        self._closed.set()
        for _ in self._workers:
            try:
                self._waiting.put_nowait(None)
            except queue.Full:
                break
        if self.admin is not None:
            self.admin.server_close()


class ListenError(OSError):
    """A port the node cannot listen on, and the setting that chose it."""

    def __init__(self, setting: str, host: str, port: int, cause: OSError):
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.setting, self.host, self.port = setting, host, port


def json_response(status: int, payload: Any) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(payload, default=str).encode()


# The console is self-contained: no script, style or image from anywhere but the page itself,
# and it talks only to this node (the admin API).
CONSOLE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; "
    "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@cache
def console_page() -> bytes:
    return resources.files("chronos.node").joinpath("console/index.html").read_bytes()


def health_routes(health: Health, registry: Collector = REGISTRY) -> Route:
    """/health/live, /health/ready and /metrics."""

    def route(_h: _Handler, method: str, path: str, _q: str) -> tuple[int, str, bytes] | None:
        if method != "GET":
            return None
        if path == "/health/live":
            ok, detail = health.live()
            return json_response(200 if ok else 503, detail)
        if path == "/health/ready":
            ok, detail = health.ready()
            return json_response(200 if ok else 503, detail)
        if path == "/metrics":
            return 200, CONTENT_TYPE_LATEST, generate_latest(registry)
        return None

    return route


def console_route(
    _h: _Handler, method: str, path: str, _q: str
) -> tuple[int, str, bytes, dict[str, str]] | None:
    if method == "GET" and path in ("/console", "/console/"):
        return 200, "text/html; charset=utf-8", console_page(), CONSOLE_HEADERS
    return None


# How often the server's loop looks whether it is asked to stop: socketserver's default of half a
# second made every node's stop wait up to that long for its HTTP server.
STOP_POLL_S = 0.05


def start_http_server(
    settings: Settings, state: Any, store: Store, *, registry: Collector = REGISTRY, **limits: Any
) -> ChronosHTTPServer:
    """Serve on a thread; ``registry`` is what /metrics serves; ``limits`` override the pool's
    (workers, backlog, idle_timeout, deadline). With CHRONOS_ADMIN_PORT the console and the admin
    API get a server of their own (``.admin``, stopped and closed with the returned one). Raises
    ListenError naming the setting of a port that cannot be listened on."""
    main: list[Route] = [health_routes(Health(settings, state, store), registry)]
    admin: list[Route] = [console_route, admin_routes(settings, store)]
    if not settings.admin_port:
        main += admin
    host = settings.http_host
    server = _serve(host, settings.http_port, "CHRONOS_HTTP_PORT", main, store, limits)
    if settings.admin_port:
        try:
            server.admin = _serve(
                host, settings.admin_port, "CHRONOS_ADMIN_PORT", admin, store, limits
            )
        except ListenError:
            server.shutdown()
            server.server_close()
            raise
    return server


def _serve(
    host: str, port: int, setting: str, routes: list[Route], store: Store, limits: dict[str, Any]
) -> ChronosHTTPServer:
    """A server on its own thread; ``setting`` names the port (and the threads)."""
    name = "chronos-admin" if setting == "CHRONOS_ADMIN_PORT" else "chronos-http"
    try:
        server = ChronosHTTPServer((host, port), _Handler, name=name, **limits)
    except OSError as exc:
        raise ListenError(setting, host, port, exc) from exc
    server.store = store
    server.routes = routes
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": STOP_POLL_S},
        name=name,
        daemon=True,
    )
    thread.start()
    log.info(
        "%s on %s:%d",
        "admin API and console" if setting == "CHRONOS_ADMIN_PORT" else "http server",
        host,
        server.server_address[1],
        extra={"event": "http_started", "setting": setting},
    )
    return server
