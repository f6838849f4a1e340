"""The TLS diagnosis at start-up (chronos.kafka.startup.tls_reason): every CA setting librdkafka
takes (a file, a directory, ``probe``, ``ssl.ca.pem``) gives Chronos's reason (then OpenSSL's
words), never an exception, against a real TLS endpoint on this machine."""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from chronos.embedded.tls import Pki
from chronos.kafka.startup import CERTIFICATE_EXPIRED, CERTIFICATE_UNTRUSTED, tls_reason
from tests.support.tls import pki_or_skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return pki_or_skip(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def expired(pki: Pki) -> Iterator[str]:
    """A TLS endpoint presenting a certificate signed by the CA but expired: its address."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.cert("expired"), pki.key("expired"))
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(conn, server_side=True):
                    pass
            except (OSError, ssl.SSLError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()
        thread.join(5)


def test_a_ca_file_names_the_reason(pki: Pki, expired: str) -> None:
    reason = tls_reason({"bootstrap.servers": expired, "ssl.ca.location": str(pki.ca)})
    assert reason is not None and reason.startswith(CERTIFICATE_EXPIRED), reason


def test_a_ca_directory_names_the_reason(pki: Pki, expired: str, tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(pki.ca.read_bytes())
    subprocess.run(["openssl", "rehash", str(tmp_path)], check=True, capture_output=True)
    reason = tls_reason({"bootstrap.servers": expired, "ssl.ca.location": str(tmp_path)})
    assert reason is not None and reason.startswith(CERTIFICATE_EXPIRED), reason


def test_probe_uses_the_system_store(expired: str) -> None:
    reason = tls_reason({"bootstrap.servers": expired, "ssl.ca.location": "probe"})
    assert reason is not None and reason.startswith(CERTIFICATE_UNTRUSTED), (
        reason
    )  # not the system's CA


def test_a_ca_given_as_pem_text_names_the_reason(pki: Pki, expired: str) -> None:
    reason = tls_reason({"bootstrap.servers": expired, "ssl.ca.pem": pki.ca.read_text()})
    assert reason is not None and reason.startswith(CERTIFICATE_EXPIRED), reason


@pytest.mark.parametrize(
    "config", [{"ssl.ca.location": "/nonexistent/ca.pem"}, {"ssl.ca.pem": "x"}]
)
def test_an_unreadable_ca_is_no_reason_and_no_exception(
    config: dict[str, str], expired: str
) -> None:
    assert tls_reason({"bootstrap.servers": expired, **config}) is None
