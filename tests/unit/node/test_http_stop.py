"""The node's HTTP server stops promptly: a node's graceful stop (and every test that stops a
node) does not wait out a long poll of the server's loop."""

from __future__ import annotations

import time
import uuid

from chronos.config.settings import Secret, load
from chronos.node.http import start_http_server
from chronos.testing import InMemoryStore
from tests.unit.admin.test_cli import FakeState


def test_the_http_server_stops_within_a_fraction_of_a_second() -> None:
    node_id = str(uuid.uuid4())
    settings = load(
        environ={},
        database_url=Secret("postgresql://unused/db"),
        node_id=node_id,
        http_host="127.0.0.1",
        http_port=0,
    )
    server = start_http_server(settings, FakeState(node_id), InMemoryStore())
    time.sleep(0.05)  # the server's loop is waiting in its poll
    started = time.monotonic()
    server.shutdown()
    took = time.monotonic() - started
    server.server_close()
    # socketserver's default poll of half a second made every stop wait up to 0.5 s.
    assert took < 0.3, f"the HTTP server took {took:.2f} s to stop"
