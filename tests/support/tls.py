"""Real TLS for the suite: a certificate authority made with ``openssl``, a Kafka-protocol broker
behind a TLS terminator (``stunnel``), and a Postgres that accepts TLS connections only.

The embedded broker has no usable TLS listener, so ``tls_broker`` starts ``stunnel`` on a port of
its own in front of the broker's plaintext port and makes the broker advertise the TLS port: a
client bootstraps through the terminator and is sent back to it for every request, so a client
without the TLS settings reaches nothing. ``tls_postgres`` runs Debian's PostgreSQL server (the
embedded binaries are built without OpenSSL) with ``ssl=on`` and ``hostssl`` rules only.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from chronos.embedded import EmbeddedBroker, EmbeddedPostgres
from chronos.embedded.process import free_port
from tests.support.services import unavailable

DEBIAN_POSTGRES = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))
"""Debian's PostgreSQL servers (built with OpenSSL), oldest first."""


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {result.stderr[-2000:]}")


@dataclass(frozen=True)
class Pki:
    """Certificates for the TLS tests, all in ``root``: a CA, a server certificate for
    ``localhost``/``127.0.0.1`` and a client certificate signed by it; a second CA that signed
    neither; a server certificate for another host and an expired one, both signed by the CA."""

    root: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca.pem"

    @property
    def other_ca(self) -> Path:
        return self.root / "other-ca.pem"

    def cert(self, name: str) -> Path:
        return self.root / f"{name}.pem"

    def key(self, name: str) -> Path:
        return self.root / f"{name}.key"

    @classmethod
    def create(cls, root: Path) -> Pki:
        if shutil.which("openssl") is None:
            unavailable("openssl is not installed (apt-get install openssl)")
        root.mkdir(parents=True, exist_ok=True)
        for ca in ("ca", "other-ca"):
            _openssl(
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-subj", f"/CN=chronos test {ca}",
                cwd=root,
            )  # fmt: skip
        leaves = {
            "server": ("localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1", "2"),
            "client": ("chronos-node", "extendedKeyUsage=clientAuth", "2"),
            "wrong-host": ("elsewhere.example", "subjectAltName=DNS:elsewhere.example", "2"),
            "expired": ("localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-1"),
        }
        for name, (cn, extension, days) in leaves.items():
            _openssl(
                "req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=root,
            )  # fmt: skip
            (root / f"{name}.ext").write_text(extension + "\n")
            _openssl(
                "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", days,
                "-extfile", f"{name}.ext",
                cwd=root,
            )  # fmt: skip
        return cls(root)


class Stunnel:
    """``stunnel`` accepting TLS on ``port`` for the plaintext ``target``, presenting
    ``cert``/``key``; with ``client_ca`` a client certificate signed by it is required."""

    def __init__(
        self,
        workdir: Path,
        target: int,
        cert: Path,
        key: Path,
        *,
        client_ca: Path | None = None,
        port: int = 0,
    ) -> None:
        self.binary = shutil.which("stunnel4") or shutil.which("stunnel")
        if self.binary is None:
            unavailable("stunnel is not installed (apt-get install stunnel4)")
        self.port = port or free_port()
        self.config = workdir / f"stunnel-{self.port}.conf"
        self.log = workdir / f"stunnel-{self.port}.log"
        lines = [
            "foreground = yes",
            f"output = {self.log}",
            "debug = 5",
            "[kafka]",
            f"accept = 127.0.0.1:{self.port}",
            f"connect = 127.0.0.1:{target}",
            f"cert = {cert}",
            f"key = {key}",
        ]
        if client_ca is not None:
            lines += [f"CAfile = {client_ca}", "verifyChain = yes", "requireCert = yes"]
        self.config.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        assert self.binary is not None
        self.proc = subprocess.Popen(
            [self.binary, str(self.config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"stunnel exited: {self.log.read_text()[-2000:]}")
            if self.log.exists() and "Configuration successful" in self.log.read_text():
                return
            time.sleep(0.05)
        raise RuntimeError(f"stunnel did not start: {self.config}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


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
        settings: dict[str, str | int | float | bool] = {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.pki.ca),
        }
        if self.mutual:
            settings["ssl.certificate.location"] = str(self.pki.cert("client"))
            settings["ssl.key.location"] = str(self.pki.key("client"))
        return settings

    def env(self) -> dict[str, str]:
        """The same settings as a node's environment (``CHRONOS_KAFKA__*`` passthrough)."""
        env = {"CHRONOS_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap}
        for name, value in self.client_settings().items():
            if name != "bootstrap.servers":
                env["CHRONOS_KAFKA__" + name.replace(".", "_").upper()] = str(value)
        return env

    def create_topics(self, topics: Mapping[str, int], timeout: float = 30.0) -> None:
        admin = AdminClient(self.client_settings())
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in topics.items()],
            operation_timeout=timeout,
            request_timeout=timeout,
        )
        for future in futures.values():
            try:
                future.result(timeout=timeout)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise


@contextmanager
def terminator(broker: TlsBroker, cert: str) -> Iterator[str]:
    """One more TLS terminator in front of ``broker``, presenting the certificate ``cert`` of
    the test PKI (another host's, an expired one); yields its bootstrap address."""
    tunnel = Stunnel(
        broker.workdir, broker.broker_port, broker.pki.cert(cert), broker.pki.key(cert)
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
    broker = EmbeddedBroker(log_dir=workdir, advertised_port=tls_port)
    broker.start()
    tunnel = Stunnel(
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
    port = server_url.split("@127.0.0.1:", 1)[1].split("/", 1)[0]
    return (
        f"postgresql://postgres@localhost:{port}/{database}"
        f"?sslmode=verify-full&sslrootcert={pki.ca}"
    )


@contextmanager
def tls_postgres(pki: Pki) -> Iterator[str]:
    """Debian's PostgreSQL server with TLS only; yields its server URL (``sslmode=require``)."""
    if not DEBIAN_POSTGRES:
        unavailable("Debian's PostgreSQL server is not installed (apt-get install postgresql-15)")
    with tempfile.TemporaryDirectory(prefix="chronos-tls-pg-") as tmp:
        workspace = Path(tmp)
        server = EmbeddedPostgres(
            workspace / "data",
            durable=False,
            workspace=workspace,
            bin_dir=DEBIAN_POSTGRES[-1].parent,
            tls=(pki.cert("server"), pki.key("server")),
        )
        with server:
            yield server.url
