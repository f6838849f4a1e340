"""TLS for the embedded stack (``chronos dev --tls``) and the suite: a certificate authority made
with ``openssl`` and the certificates it signs, the PostgreSQL binaries built with OpenSSL
(Debian's; the embedded ones have none), and the settings of a client that trusts the CA.

The embedded Apache Kafka serves TLS on its own listeners (:mod:`chronos.embedded.kafka.security`)
with the server certificate made here; the client certificate's subject (``CN=chronos-node``) is
the principal its ACLs name.
"""

from __future__ import annotations

import shutil
import subprocess
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
