"""The node's HTTP server: liveness, readiness and Prometheus metrics (admin API: chronos.admin).

GET /health/live   200 while every loop thread runs
GET /health/ready  200 while the loops run, Postgres answers and the broker answers
GET /metrics       Prometheus text format
/admin/v1/...      the admin API (off unless CHRONOS_ADMIN_TOKEN is set), see chronos.admin
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from chronos.admin import admin_routes
from chronos.settings import Settings
from chronos.store import Store

log = logging.getLogger(__name__)

READY_CACHE_SECONDS = 1.0


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
        alive = self.state.loops_alive()
        return alive, {"loops": "running" if alive else "stopped", "node": self.state.node_id}

    def ready(self) -> tuple[bool, dict[str, str]]:
        with self._lock:
            if time.monotonic() - self._checked_at < READY_CACHE_SECONDS:
                return self._result
            checks: dict[str, str] = {"node": self.state.node_id}
            ok = True
            if self.state.stopping:
                ok, checks["node_state"] = False, "stopping"
            if not self.state.loops_alive():
                ok, checks["loops"] = False, "stopped"
            try:
                self.store.ping()
                checks["postgres"] = "ok"
            except Exception as exc:
                ok, checks["postgres"] = False, f"error: {exc}"[:200]
            broker_ok, detail = broker_reachable(self.settings)
            checks["kafka"] = detail
            ok = ok and broker_ok
            self._result = (ok, checks)
            self._checked_at = time.monotonic()
            return self._result


def broker_reachable(settings: Settings) -> tuple[bool, str]:
    from confluent_kafka.admin import AdminClient

    from chronos.kafka import producer_config

    try:
        conf = {
            k: v
            for k, v in producer_config(settings, "health").items()
            if not k.startswith(
                (
                    "enable.idempotence",
                    "acks",
                    "delivery",
                    "partitioner",
                    "linger",
                    "batch",
                    "queue",
                    "request",
                )
            )
        }
        metadata = AdminClient(conf).list_topics(topic=settings.output_topic, timeout=2)
        topic = metadata.topics.get(settings.output_topic)
        if topic is None or topic.error is not None:
            return False, f"output topic {settings.output_topic} missing"
        return True, "ok"
    except Exception as exc:
        return False, f"error: {exc}"[:200]


Route = Any  # (handler, method, path, query) -> (status, content_type, body[, headers]) | None


class _Handler(BaseHTTPRequestHandler):
    server: ChronosHTTPServer

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
            # Each request runs on a new thread: close its database connection (if it opened
            # one) rather than leave one open connection behind per request.
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


class ChronosHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    routes: list[Route]
    store: Store | None = None


def json_response(status: int, payload: Any) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(payload, default=str).encode()


def core_routes(health: Health) -> Route:
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
            return 200, CONTENT_TYPE_LATEST, generate_latest()
        return None

    return route


def start_http_server(settings: Settings, state: Any, store: Store) -> ChronosHTTPServer:
    server = ChronosHTTPServer((settings.http_host, settings.http_port), _Handler)
    server.store = store
    server.routes = [core_routes(Health(settings, state, store)), admin_routes(settings, store)]
    thread = threading.Thread(target=server.serve_forever, name="chronos-http", daemon=True)
    thread.start()
    log.info(
        "http server on %s:%d",
        settings.http_host,
        server.server_address[1],
        extra={"event": "http_started"},
    )
    return server
