"""Security of the embedded Apache Kafka: its own TLS listeners (PEM key and certificates, client
certificates required), a SASL_SSL listener with SCRAM-SHA-512 users created when the storage
is formatted, and the standard authorizer with super users.

A secured node listens on its TLS and SASL_SSL ports only; the controller listener stays
plaintext on the node's host (localhost), where the broker registers with its own controller.
Brokers talk to each other over the first TLS listener, presenting its certificate. Extra TLS
listeners may present other certificates or not ask for a client certificate (the suite's
failure cases: another host's certificate, an expired one).

The key and certificates go into ``server.properties`` as PEM text (``ssl.keystore.type=PEM``
with ``ssl.keystore.certificate.chain`` and ``ssl.keystore.key``; ``ssl.truststore.type=PEM``
with ``ssl.truststore.certificates``): no Java keystore is made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SCRAM = "SCRAM-SHA-512"
CONTROLLER_PRINCIPAL = "User:ANONYMOUS"
"""Who the broker is on the plaintext controller listener (it registers with its controller)."""


@dataclass(frozen=True)
class TlsListener:
    """A TLS listener (``SSL``, or ``SASL_SSL`` when ``sasl``) presenting ``cert``/``key``
    (PEM files; the key unencrypted PKCS#8, as ``openssl req -nodes`` writes it)."""

    name: str
    port: int
    cert: Path
    key: Path
    client_auth: bool = True  # require a client certificate signed by the CA (SSL only)
    sasl: bool = False  # SCRAM-SHA-512 over TLS; no client certificate asked for

    @property
    def protocol(self) -> str:
        return "SASL_SSL" if self.sasl else "SSL"


@dataclass(frozen=True)
class BrokerSecurity:
    """What a secured node serves: ``listeners`` (the first a plain TLS one: brokers use it
    among themselves), trusting ``ca`` for client certificates; ``users`` (name: password)
    created as SCRAM-SHA-512 credentials when the storage is formatted; with ``acls`` the
    standard authorizer, ``super_users`` (principals such as ``User:admin``) allowed
    everything."""

    listeners: Sequence[TlsListener]
    ca: Path
    users: Mapping[str, str] = field(default_factory=dict)
    acls: bool = False
    super_users: Sequence[str] = ()
    broker_principal: str = "User:CN=localhost"  # the first listener's certificate's subject

    def __post_init__(self) -> None:
        if not self.listeners or self.listeners[0].sasl:
            raise ValueError("a secured Kafka node needs a TLS listener first")
        for user, password in self.users.items():
            if not user or not password or any(c in user + password for c in ",[]"):
                raise ValueError(f"SCRAM user {user!r}: a name and a password without , [ ]")

    @property
    def inter_broker_listener(self) -> str:
        return self.listeners[0].name

    def listener_urls(self, host: str) -> str:
        return ",".join(f"{lst.name}://{host}:{lst.port}" for lst in self.listeners)

    def protocol_map(self) -> str:
        return ",".join(f"{lst.name}:{lst.protocol}" for lst in self.listeners)

    def properties(self) -> dict[str, str]:
        """The server properties of the listeners, their key stores and the authorizer."""
        trust = pem_text(self.ca)
        props: dict[str, str] = {"sasl.enabled.mechanisms": SCRAM}
        for listener in self.listeners:
            prefix = f"listener.name.{listener.name.lower()}."
            props.update(
                {
                    f"{prefix}ssl.keystore.type": "PEM",
                    f"{prefix}ssl.keystore.certificate.chain": pem_text(listener.cert),
                    f"{prefix}ssl.keystore.key": pem_text(listener.key),
                    f"{prefix}ssl.truststore.type": "PEM",
                    f"{prefix}ssl.truststore.certificates": trust,
                    f"{prefix}ssl.client.auth": (
                        "required" if listener.client_auth and not listener.sasl else "none"
                    ),
                }
            )
            if listener.sasl:
                props[f"{prefix}sasl.enabled.mechanisms"] = SCRAM
                props[f"{prefix}{SCRAM.lower()}.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                )
        if self.acls:
            supers = [CONTROLLER_PRINCIPAL, self.broker_principal, *self.super_users]
            props["authorizer.class.name"] = AUTHORIZER
            props["super.users"] = ";".join(dict.fromkeys(supers))
            props["allow.everyone.if.no.acl.found"] = "false"
        return props

    def format_args(self) -> list[str]:
        """StorageTool ``format`` arguments creating the SCRAM users."""
        args: list[str] = []
        for name, password in self.users.items():
            args += ["--add-scram", f"{SCRAM}=[name={name},password={password}]"]
        return args


def pem_text(path: Path) -> str:
    """A PEM file's text, as a properties value takes it (no trailing newline)."""
    return path.read_text().strip()


def escape(value: str) -> str:
    """A value for a Java properties file: backslashes and line breaks escaped."""
    return value.replace("\\", "\\\\").replace("\n", "\\n")
