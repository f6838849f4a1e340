"""TLS for the embedded stack (``chronos dev --tls``) and the suite: a certificate authority made
with ``openssl``, a TLS terminator (``stunnel``) in front of the embedded broker, and the
PostgreSQL binaries built with OpenSSL (Debian's; the embedded ones have none).

The embedded broker has no usable TLS listener, so the terminator accepts TLS on a port of its
own and forwards to the broker's plaintext port, and the broker advertises the terminator's port:
a client bootstraps through it and is sent back to it for every request, so a client without the
TLS settings reaches nothing.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from chronos.errors import ConfigError

POSTGRES_WITH_OPENSSL = "/usr/lib/postgresql/*/bin/postgres"
"""Where Debian's PostgreSQL servers (built with OpenSSL) are."""


def postgres_with_openssl() -> Path:
    """The newest Debian PostgreSQL binaries directory; ConfigError when there is none."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parts[-3])
    )
    if not found:
        raise ConfigError(
            "TLS to Postgres needs a PostgreSQL server built with OpenSSL (the embedded one has "
            "none): apt-get install postgresql-15"
        )
    return found[-1].parent


def _openssl(*args: str, cwd: Path) -> None:
    if shutil.which("openssl") is None:
        raise ConfigError("TLS needs the openssl command: apt-get install openssl")
    result = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ConfigError(f"openssl {' '.join(args[:2])} failed: {result.stderr[-2000:]}")


# name: (common name, extension, days valid)
_LEAVES = {
    "server": ("localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1", "30"),
    "client": ("chronos-node", "extendedKeyUsage=clientAuth", "30"),
    "wrong-host": ("elsewhere.example", "subjectAltName=DNS:elsewhere.example", "30"),
    "expired": ("localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-1"),
}


@dataclass(frozen=True)
class Pki:
    """Certificates in ``root``: a CA, a server certificate for ``localhost``/``127.0.0.1`` and a
    client certificate signed by it; a second CA that signed neither; a server certificate for
    another host and an expired one, both signed by the CA (for the failure tests)."""

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
        """Make the certificates, or keep those already in ``root``."""
        pki = cls(root)
        if all(pki.cert(n).exists() for n in _LEAVES) and pki.other_ca.exists():
            return pki
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o700)
        for ca in ("ca", "other-ca"):
            _openssl(
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
                "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-subj", f"/CN=chronos dev {ca}",
                cwd=root,
            )  # fmt: skip
        for name, (cn, extension, days) in _LEAVES.items():
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
        return pki


class Stunnel:
    """``stunnel`` accepting TLS on ``port`` for the plaintext ``target`` port, presenting
    ``cert``/``key``; with ``client_ca`` a client certificate signed by it is required."""

    def __init__(
        self,
        workdir: Path,
        target: int,
        cert: Path,
        key: Path,
        *,
        port: int,
        client_ca: Path | None = None,
    ) -> None:
        binary = shutil.which("stunnel4") or shutil.which("stunnel")
        if binary is None:
            raise ConfigError("TLS to the embedded broker needs stunnel: apt-get install stunnel4")
        self.binary = binary
        self.port = port
        self.config = workdir / f"stunnel-{port}.conf"
        self.log = workdir / f"stunnel-{port}.log"
        lines = [
            "foreground = yes",
            f"output = {self.log}",
            "debug = 5",
            "[kafka]",
            f"accept = 127.0.0.1:{port}",
            f"connect = 127.0.0.1:{target}",
            f"cert = {cert}",
            f"key = {key}",
        ]
        if client_ca is not None:
            lines += [f"CAfile = {client_ca}", "verifyChain = yes", "requireCert = yes"]
        self.config.write_text("\n".join(lines) + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        self.log.unlink(missing_ok=True)
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
                tail = self.log.read_text()[-2000:] if self.log.exists() else ""
                raise ConfigError(f"stunnel exited on port {self.port}: {tail}")
            if self.log.exists() and "Configuration successful" in self.log.read_text():
                return
            time.sleep(0.05)
        self.stop()
        raise ConfigError(f"stunnel did not start on port {self.port} ({self.config})")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def verify_full_url(port: int, ca: Path, database: str = "postgres") -> str:
    """A libpq URL for ``database`` on the local TLS-only server that verifies its certificate
    and host name against ``ca``."""
    return f"postgresql://postgres@localhost:{port}/{database}?sslmode=verify-full&sslrootcert={ca}"


def client_properties(pki: Pki, *, mutual: bool = True) -> dict[str, str]:
    """librdkafka settings of a client that trusts the PKI's CA (with its client certificate)."""
    properties = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    if mutual:
        properties["ssl.certificate.location"] = str(pki.cert("client"))
        properties["ssl.key.location"] = str(pki.key("client"))
    return properties
