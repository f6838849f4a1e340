"""The node's HTTP server on real sockets: bounded under idle/trickling clients, and probes that
never hand database details to an unauthenticated caller."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from chronos.config.settings import Secret, load
from chronos.config.validation import validate
from chronos.node.http import ChronosHTTPServer, ListenError, start_http_server
from chronos.store import PostgresStore

pytestmark = pytest.mark.integration

# A database nobody listens on, with a recognisable user, password and database name.
UNREACHABLE_DB = "postgresql://chronos_user:hunter2secret@127.0.0.1:1/secretdb"


@dataclass
class State:
    node_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    stopping: bool = False
    waiting_for: str = ""  # what start-up waits for ("" once the loops run)
    stalled: list[str] = field(default_factory=list)
    warming: list[str] = field(default_factory=list)

    def loops_alive(self) -> bool:
        return True

    def warming_loops(self) -> list[str]:
        return self.warming

    def stalled_loops(self) -> list[str]:
        return self.stalled


def _get(url: str, timeout: float = 10) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ChronosHTTPServer] = []

    def start(state: State, **limits: Any) -> str:
        settings = validate(
            load(
                environ={},
                database_url=Secret(UNREACHABLE_DB),
                kafka_bootstrap_servers="127.0.0.1:1",
                http_host="127.0.0.1",
                http_port=0,
            )
        )
        server = start_http_server(settings, state, PostgresStore(UNREACHABLE_DB), **limits)
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_idle_connections_cannot_exhaust_the_node(serve: Any) -> None:
    base = serve(State(), workers=4, backlog=8, idle_timeout=1.0, deadline=3.0)
    port = int(base.rsplit(":", 1)[1])
    before = threading.active_count()
    # Twice what the pool and its backlog hold.
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(24)]
    trickle = socket.create_connection(("127.0.0.1", port))
    try:
        time.sleep(0.5)
        # No thread per connection: the pool is all there is.
        assert threading.active_count() <= before + 1
        # A client sending one byte at a time is cut at the deadline, not kept forever.
        trickle.settimeout(0.3)
        started = time.monotonic()
        cut = False
        while time.monotonic() - started < 8:
            try:
                trickle.sendall(b"G")
                if trickle.recv(1) == b"":
                    cut = True
                    break
            except TimeoutError:
                continue
            except OSError:
                cut = True
                break
        assert cut, "a trickling client held a worker for 8 s"
        # Idle connections are closed by the server after the idle timeout.
        idle[0].settimeout(5)
        assert idle[0].recv(1) == b""
        # And the node answers again once they are gone.
        for conn in idle:
            conn.close()
        status, body = _get(base + "/health/live")
        assert status == 200 and body["loops"] == "running"
    finally:
        trickle.close()
        for conn in idle:
            conn.close()


def test_readiness_gives_a_category_and_never_the_database_details(
    serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    base = serve(State())
    with caplog.at_level("WARNING", logger="chronos.node.http"):
        status, body = _get(base + "/health/ready")
    assert status == 503
    assert body["postgres"] == "unavailable"
    assert body["kafka"] == "unavailable"
    text = json.dumps(body)
    for secret in ("hunter2", "chronos_user", "127.0.0.1", "secretdb", "port 1"):
        assert secret not in text
    assert any("127.0.0.1" in r.getMessage() for r in caplog.records)  # the log has the detail


def test_liveness_names_a_stalled_loop(serve: Any) -> None:
    state = State()
    base = serve(state)
    assert _get(base + "/health/live")[0] == 200
    state.stalled = ["firing"]
    status, body = _get(base + "/health/live")
    assert status == 503 and body["loops"] == "stalled: firing"


# ----------------------------------------------------------------------------------------------
# CHRONOS_ADMIN_PORT: the admin API and the console apart from health and metrics
# ----------------------------------------------------------------------------------------------

ADMIN_TOKEN = "adm1n-t0ken"
ADMIN_PATHS = ("/console", "/admin/v1/openapi.json", "/admin/v1/whoami")
MAIN_PATHS = ("/health/live", "/metrics")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _status(url: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.fixture
def serve_ports() -> Iterator[Any]:
    """``serve_ports(admin_port)``: a node's HTTP server(s); the base URLs of both ports."""
    servers: list[ChronosHTTPServer] = []

    def start(admin_port: int) -> tuple[str, str]:
        settings = validate(
            load(
                environ={},
                database_url=Secret(UNREACHABLE_DB),
                kafka_bootstrap_servers="127.0.0.1:1",
                admin_token=Secret(ADMIN_TOKEN),
                http_host="127.0.0.1",
                http_port=_free_port(),
                admin_port=admin_port,
            )
        )
        server = start_http_server(settings, State(), PostgresStore(UNREACHABLE_DB))
        servers.append(server)
        main = f"http://127.0.0.1:{server.server_address[1]}"
        admin = f"http://127.0.0.1:{server.admin.server_address[1]}" if server.admin else main
        return main, admin

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_one_port_serves_everything_by_default(serve_ports: Any) -> None:
    main, admin = serve_ports(0)
    assert main == admin
    for path in (*MAIN_PATHS, *ADMIN_PATHS):
        assert _status(main + path) == 200, path


def test_an_admin_port_takes_the_admin_api_and_the_console_off_the_http_port(
    serve_ports: Any,
) -> None:
    main, admin = serve_ports(_free_port())
    assert main != admin
    for path in MAIN_PATHS:
        assert _status(main + path) == 200, path
        assert _status(admin + path) == 404, path  # a scraper has nothing to look for there
    for path in ADMIN_PATHS:
        assert _status(admin + path) == 200, path
        assert _status(main + path) == 404, path
    # A write (no token: the admin API would answer 401) never reaches the API either.
    request = urllib.request.Request(main + "/admin/v1/messages/x", method="DELETE")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 404


def test_a_busy_admin_port_is_named_and_leaves_no_server_behind(serve_ports: Any) -> None:
    _, admin = serve_ports(_free_port())
    port = int(admin.rsplit(":", 1)[1])
    settings = load(environ={}, http_host="127.0.0.1", http_port=_free_port(), admin_port=port)
    with pytest.raises(ListenError) as taken:  # the admin port is in use: named, nothing left
        start_http_server(settings, State(), PostgresStore(UNREACHABLE_DB))
    assert (taken.value.setting, taken.value.port) == ("CHRONOS_ADMIN_PORT", port)
    with socket.socket() as probe:  # the HTTP port of the failed start was released
        probe.bind(("127.0.0.1", settings.http_port))


def test_the_http_and_admin_servers_close_as_one(serve_ports: Any) -> None:
    settings = load(
        environ={}, http_host="127.0.0.1", http_port=_free_port(), admin_port=_free_port()
    )
    server = start_http_server(settings, State(), PostgresStore(UNREACHABLE_DB))
    assert server.admin is not None
    assert _status(f"http://127.0.0.1:{settings.admin_port}/console") == 200
    server.shutdown()
    server.server_close()
    for port in (settings.http_port, settings.admin_port):
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
