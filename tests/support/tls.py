"""Real TLS for the suite, from ``chronos.embedded.tls``: a broker reachable only through a TLS
terminator (``tls_broker``; mutual or not) and Debian's PostgreSQL server with ``ssl=on`` and
``hostssl`` rules only (``tls_postgres``). Without openssl, stunnel or that server the tests skip
locally and fail in CI (``unavailable``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from chronos.config.settings import passthrough_env
from chronos.embedded import EmbeddedKafka, EmbeddedPostgres, create_topics
from chronos.embedded.process import free_port
from chronos.embedded.tls import Pki, Stunnel, client_properties, postgres_with_openssl
from chronos.embedded.tls import verify_full_url as embedded_verify_full_url
from chronos.errors import ConfigError
from tests.support.services import unavailable


def pki_or_skip(root: Path) -> Pki:
    """The test PKI; skipped locally (failed in CI) without openssl."""
    try:
        return Pki.create(root)
    except ConfigError as exc:
        unavailable(str(exc))


def _stunnel(*args: object, **kwargs: object) -> Stunnel:
    try:
        return Stunnel(*args, **kwargs)  # type: ignore[arg-type]
    except ConfigError as exc:
        unavailable(str(exc))


@dataclass(frozen=True)
class TlsBroker:
    """A broker reachable only through TLS at ``bootstrap``; ``client_settings`` are the
    librdkafka settings of a client that trusts it (with its client certificate when mutual)."""

    bootstrap: str
    pki: Pki
    mutual: bool
    broker_port: int  # the broker's own plaintext port (behind the terminator)
    workdir: Path

    def client_settings(self) -> dict[str, str | int | float | bool]:
        return {
            "bootstrap.servers": self.bootstrap,
            **client_properties(self.pki, mutual=self.mutual),
        }

    def env(self) -> dict[str, str]:
        """The same settings as a node's environment (``CHRONOS_KAFKA__*`` passthrough)."""
        env = {"CHRONOS_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap}
        for name, value in client_properties(self.pki, mutual=self.mutual).items():
            env[passthrough_env(name)] = value
        return env

    def create_topics(self, topics: Mapping[str, int]) -> None:
        create_topics(
            self.bootstrap, topics, client=client_properties(self.pki, mutual=self.mutual)
        )


@contextmanager
def terminator(broker: TlsBroker, cert: str) -> Iterator[str]:
    """One more TLS terminator in front of ``broker``, presenting the certificate ``cert`` of
    the test PKI (another host's, an expired one); yields its bootstrap address."""
    tunnel = _stunnel(
        broker.workdir,
        broker.broker_port,
        broker.pki.cert(cert),
        broker.pki.key(cert),
        port=free_port(),
    )
    try:
        tunnel.start()
        yield f"127.0.0.1:{tunnel.port}"
    finally:
        tunnel.stop()


@contextmanager
def tls_broker(pki: Pki, workdir: Path, *, mutual: bool) -> Iterator[TlsBroker]:
    """An embedded broker behind ``stunnel`` (client certificates required when ``mutual``)."""
    tls_port = free_port()
    broker = EmbeddedKafka(log_dir=workdir, advertised_port=tls_port)
    broker.start()
    tunnel = _stunnel(
        workdir,
        broker.port,
        pki.cert("server"),
        pki.key("server"),
        client_ca=pki.ca if mutual else None,
        port=tls_port,
    )
    try:
        tunnel.start()
        yield TlsBroker(f"127.0.0.1:{tls_port}", pki, mutual, broker.port, workdir)
    finally:
        tunnel.stop()
        broker.stop()


def verify_full_url(server_url: str, pki: Pki, database: str = "postgres") -> str:
    """A libpq URL for ``database`` on the TLS-only server that verifies its certificate and
    host name against the test CA."""
    port = int(server_url.split("@127.0.0.1:", 1)[1].split("/", 1)[0])
    return embedded_verify_full_url(port, pki.ca, database)


@contextmanager
def tls_postgres(pki: Pki) -> Iterator[str]:
    """Debian's PostgreSQL server with TLS only; yields its server URL (``sslmode=require``)."""
    try:
        bin_dir = postgres_with_openssl()
    except ConfigError as exc:
        unavailable(str(exc))
    with tempfile.TemporaryDirectory(prefix="chronos-tls-pg-") as tmp:
        workspace = Path(tmp)
        server = EmbeddedPostgres(
            workspace / "data",
            durable=False,
            workspace=workspace,
            bin_dir=bin_dir,
            tls=(pki.cert("server"), pki.key("server")),
        )
        with server:
            yield server.url
