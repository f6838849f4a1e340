"""Real TLS for the suite: the embedded Apache Kafka on its own TLS and SASL_SSL (SCRAM-SHA-512)
listeners with ACLs on (``secured_broker``), certificates from ``chronos.embedded.tls``, and
Debian's PostgreSQL server with ``ssl=on`` and ``hostssl`` rules only (``tls_postgres``).
Without openssl, Java or that server the tests skip locally and fail in CI (``unavailable``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from chronos.config.settings import passthrough_env
from chronos.embedded import EmbeddedKafka, EmbeddedPostgres, create_topics
from chronos.embedded.kafka.security import BrokerSecurity, TlsListener
from chronos.embedded.process import free_port
from chronos.embedded.tls import Pki, client_properties, postgres_with_openssl
from chronos.embedded.tls import verify_full_url as embedded_verify_full_url
from chronos.errors import ChronosError, ConfigError
from tests.support.services import unavailable


def pki_or_skip(root: Path) -> Pki:
    """The test PKI; skipped locally (failed in CI) without openssl."""
    try:
        return Pki.create(root)
    except ConfigError as exc:
        unavailable(str(exc))


ADMIN = ("admin", "admin-secret")
"""The super user of the secured broker (SCRAM): it creates topics and ACLs."""
NODE_USER = ("chronos", "chronos-secret")
"""A SCRAM user allowed every topic and group (``*``)."""
LIMITED_USER = ("limited", "limited-secret")
"""A SCRAM user allowed only what a test grants it."""
CERT_PRINCIPAL = "User:CN=chronos-node"
"""Who a client presenting the PKI's client certificate is (allowed every topic and group)."""

# listener name: (certificate presented, client certificate required, SCRAM)
LISTENERS = {
    "TLS": ("server", True, False),
    "SCRAM": ("server", False, True),
    "ONEWAY": ("server", False, False),  # server-authenticated TLS only
    "WRONGHOST": ("wrong-host", True, False),
    "EXPIRED": ("expired", True, False),
}


@dataclass(frozen=True)
class TlsBroker:
    """One way into the secured broker: ``bootstrap`` (a listener's address) and the librdkafka
    settings of a client that uses it (``client``)."""

    bootstrap: str
    client: Mapping[str, str]
    admin: Mapping[str, str]  # the super user's settings (SCRAM), bootstrap included

    def client_settings(self) -> dict[str, str | int | float | bool]:
        return {"bootstrap.servers": self.bootstrap, **self.client}

    def env(self) -> dict[str, str]:
        """The same settings as a node's environment (``CHRONOS_KAFKA__*`` passthrough)."""
        env = {"CHRONOS_KAFKA_BOOTSTRAP_SERVERS": self.bootstrap}
        for name, value in self.client.items():
            env[passthrough_env(name)] = value
        return env

    def create_topics(self, topics: Mapping[str, int]) -> None:
        """Created by the super user."""
        admin = dict(self.admin)
        create_topics(admin.pop("bootstrap.servers"), topics, client=admin)


@dataclass(frozen=True)
class SecuredBroker:
    """The embedded Apache Kafka with its own TLS listeners (client certificates required on
    ``TLS``), SCRAM-SHA-512 over TLS on ``SCRAM`` and the standard authorizer: ``admin`` is a
    super user, ``chronos`` and the client certificate may use every topic and group,
    ``limited`` only what a test grants. Test-only listeners present another host's certificate
    (``WRONGHOST``), an expired one (``EXPIRED``) or ask for no client certificate
    (``ONEWAY``)."""

    pki: Pki
    ports: Mapping[str, int]
    broker: EmbeddedKafka

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def admin_settings(self) -> dict[str, str]:
        return {"bootstrap.servers": self.address("SCRAM"), **self.scram_properties(*ADMIN)}

    def scram_properties(self, user: str, password: str) -> dict[str, str]:
        return scram_client_properties(user, password, ca=self.pki.ca)

    def tls(self, listener: str = "TLS", *, mutual: bool = True) -> TlsBroker:
        """Through a TLS listener, with the client certificate when ``mutual``."""
        client = client_properties(self.pki, mutual=mutual)
        return TlsBroker(self.address(listener), client, self.admin_settings())

    def scram(self, user: tuple[str, str] = NODE_USER) -> TlsBroker:
        """Through the SASL_SSL listener as ``user`` (name, password)."""
        return TlsBroker(self.address("SCRAM"), self.scram_properties(*user), self.admin_settings())

    def grant(self, principal: str, topic: str, *operations: AclOperation) -> None:
        """Allow ``principal`` ``operations`` on ``topic`` (a name or ``*``)."""
        grant(self.admin_settings(), principal, ResourceType.TOPIC, topic, operations)

    def grant_group(self, principal: str, group: str, *operations: AclOperation) -> None:
        """Allow ``principal`` ``operations`` on the consumer group ``group``."""
        grant(self.admin_settings(), principal, ResourceType.GROUP, group, operations)


def scram_client_properties(user: str, password: str, *, ca: Path) -> dict[str, str]:
    """librdkafka settings of a SCRAM-SHA-512 client over TLS trusting ``ca`` (as
    docs/configuration.md shows them)."""
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(ca),
    }


def grant(
    admin_settings: Mapping[str, str],
    principal: str,
    kind: ResourceType,
    name: str,
    operations: Sequence[AclOperation],
) -> None:
    create_acls(admin_settings, bindings(principal, kind, name, operations))


def bindings(
    principal: str, kind: ResourceType, name: str, operations: Sequence[AclOperation]
) -> list[AclBinding]:
    """ALLOW ``principal`` each of ``operations`` on the resource ``kind`` ``name``."""
    return [
        AclBinding(
            kind,
            name,
            ResourcePatternType.LITERAL,
            principal,
            "*",
            operation,
            AclPermissionType.ALLOW,
        )
        for operation in operations
    ]


def create_acls(admin_settings: Mapping[str, str], acls: Sequence[AclBinding]) -> None:
    """Create ``acls`` in one request, as the super user."""
    admin = AdminClient(dict(admin_settings))
    for future in admin.create_acls(list(acls), request_timeout=15).values():
        future.result()


@contextmanager
def secured_broker(pki: Pki, workdir: Path) -> Iterator[SecuredBroker]:
    """An embedded broker with its own TLS and SASL_SSL listeners and ACLs on (see
    :class:`SecuredBroker`); skipped locally (failed in CI) if it cannot start."""
    ports = {name: free_port() for name in LISTENERS}
    listeners = [
        TlsListener(name, ports[name], pki.cert(cert), pki.key(cert), client_auth=mutual, sasl=sasl)
        for name, (cert, mutual, sasl) in LISTENERS.items()
    ]
    security = BrokerSecurity(
        listeners,
        pki.ca,
        users=dict([ADMIN, NODE_USER, LIMITED_USER]),
        acls=True,
        super_users=[f"User:{ADMIN[0]}"],
    )
    broker = EmbeddedKafka(log_dir=workdir, security=security, client=client_properties(pki))
    try:
        try:
            broker.start()
        except ChronosError as exc:
            unavailable(f"cannot start the secured Apache Kafka: {exc}")
        secured = SecuredBroker(pki, ports, broker)
        everything = [AclOperation.ALL]
        create_acls(
            secured.admin_settings(),
            [
                acl
                for principal in (f"User:{NODE_USER[0]}", CERT_PRINCIPAL)
                for kind in (ResourceType.TOPIC, ResourceType.GROUP)
                for acl in bindings(principal, kind, "*", everything)
            ],
        )
        yield secured
    finally:
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
