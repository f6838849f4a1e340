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
from chronos.node.http import ChronosHTTPServer, start_http_server
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
