"""The start-up refusal parser (``chronos.kafka.startup.refusal``) fed the lines a real librdkafka
writes against the real embedded broker: each refusal Chronos names is produced for real (a
SASL password or user the broker refuses, a missing client certificate, a CA that did not sign
the broker's certificate, an expired or another host's certificate, a plaintext client on a TLS
listener, a TLS client on a plaintext one, a client certificate of another CA), its log lines
captured, and Chronos's own reason asserted, with the setting it names; and ``reach_broker``
itself, which collects the lines of its own client at start-up, names them alike.

A client certificate from a CA the broker does not trust is named too, but not through the
"unknown ca" alert: librdkafka sees that the broker's list of CAs lacks its issuer and sends no
certificate ("No matching issuer found ..."), so the broker asks for one ("certificate
required"). Not produced here: that "unknown ca" alert (a client that sends such a certificate
anyway) and the other JDK's alert for a missing certificate (a broker's JDK sends either "bad
certificate" or "certificate required"), nor librdkafka 1.x's "incorrect security.protocol"
(this one says only that the connection closed at its first request); the unit tests
(tests/unit/kafka/test_topic_access.py) keep their lines."""

from __future__ import annotations

import logging
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from chronos.config.settings import Secret
from chronos.embedded.tls import Pki
from chronos.errors import ConfigError
from chronos.kafka.startup import (
    CLIENT_CERTIFICATE_REFUSED,
    PROTOCOL_MISMATCH,
    SASL_REFUSED,
    TLS_HANDSHAKE_FAILED,
    reach_broker,
    refusal,
)
from tests.support import Topics, make_settings
from tests.support.tls import NODE_USER, SecuredBroker

pytestmark = pytest.mark.integration

WITHIN_S = 20.0
UNUSED_DATABASE = "postgresql://chronos@127.0.0.1:1/unused"  # start-up asks Kafka first


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def refused(config: Mapping[str, str]) -> tuple[str | None, list[str]]:
    """Ask a real librdkafka client for the cluster's metadata until its log lines say why it
    is refused (as ``reach_broker`` does at start-up): what ``refusal`` makes of the lines, and
    the lines themselves."""
    logger = logging.getLogger(f"tests.librdkafka.{uuid.uuid4().hex}")
    logger.propagate = False
    logger.setLevel(logging.INFO)  # a connection closed at its first request is an INFO line
    lines = _Lines()
    logger.addHandler(lines)
    admin = AdminClient({**config, "logger": logger})  # type: ignore[dict-item]
    deadline = time.monotonic() + WITHIN_S
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=1.0)
        except KafkaException:
            pass
        else:
            pytest.fail(f"the broker accepted the client: {lines.lines}")
        admin.poll(0.2)  # the log lines are served by poll
        said = refusal(lines.lines)
        if said is not None:
            return said, lines.lines
    return None, lines.lines


def _foreign_client_certificate(pki: Pki, directory: Path) -> tuple[Path, Path]:
    """A client certificate signed by the PKI's second CA, which the broker does not trust."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "foreign.key", "-out", "foreign.csr",
        "-subj", "/CN=chronos-node",
    )  # fmt: skip
    openssl(
        "x509", "-req", "-in", "foreign.csr", "-CA", str(pki.other_ca),
        "-CAkey", str(pki.root / "other-ca.key"), "-CAcreateserial", "-out", "foreign.pem",
        "-days", "1",
    )  # fmt: skip
    return directory / "foreign.pem", directory / "foreign.key"


def _scram(broker: SecuredBroker, user: str, password: str) -> dict[str, str]:
    return {"bootstrap.servers": broker.address("SCRAM"), **broker.scram_properties(user, password)}


def _tls(broker: SecuredBroker, listener: str = "TLS", *, mutual: bool = True) -> dict[str, str]:
    return dict(broker.tls(listener, mutual=mutual).client_settings())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("case", "reason", "setting"),
    [
        ("wrong password", SASL_REFUSED, "CHRONOS_KAFKA__SASL_PASSWORD"),
        ("unknown user", SASL_REFUSED, "CHRONOS_KAFKA__SASL_USERNAME"),
        (
            "missing client certificate",
            CLIENT_CERTIFICATE_REFUSED,
            "CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION",
        ),
        ("wrong CA", TLS_HANDSHAKE_FAILED, "CHRONOS_KAFKA__SSL_CA_LOCATION"),
        ("SCRAM, wrong CA", TLS_HANDSHAKE_FAILED, "CHRONOS_KAFKA__SSL_CA_LOCATION"),
        ("expired certificate", TLS_HANDSHAKE_FAILED, "CHRONOS_KAFKA__SSL_CA_LOCATION"),
        ("another host's certificate", TLS_HANDSHAKE_FAILED, "CHRONOS_KAFKA__SSL_CA_LOCATION"),
        ("plaintext client, TLS listener", PROTOCOL_MISMATCH, "CHRONOS_KAFKA__SECURITY_PROTOCOL"),
        ("TLS client, plaintext listener", PROTOCOL_MISMATCH, "CHRONOS_KAFKA__SECURITY_PROTOCOL"),
        (
            "client certificate of another CA",
            CLIENT_CERTIFICATE_REFUSED,
            "CHRONOS_KAFKA__SSL_CERTIFICATE_LOCATION",
        ),
    ],
)
def test_real_librdkafka_refusals_are_named_by_chronos(
    case: str,
    reason: str,
    setting: str,
    secured_kafka: SecuredBroker,
    tls_pki: Pki,
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    if case == "wrong password":
        config = _scram(secured_kafka, NODE_USER[0], "not-" + NODE_USER[1])
    elif case == "unknown user":
        config = _scram(secured_kafka, "nobody", NODE_USER[1])
    elif case == "missing client certificate":
        config = _tls(secured_kafka, mutual=False)
    elif case == "wrong CA":
        config = {**_tls(secured_kafka), "ssl.ca.location": str(tls_pki.other_ca)}
    elif case == "SCRAM, wrong CA":
        config = {**_scram(secured_kafka, *NODE_USER), "ssl.ca.location": str(tls_pki.other_ca)}
    elif case == "expired certificate":
        config = _tls(secured_kafka, "EXPIRED")
    elif case == "another host's certificate":
        config = _tls(secured_kafka, "WRONGHOST")
    elif case == "plaintext client, TLS listener":
        config = {"bootstrap.servers": secured_kafka.address("TLS")}
    elif case == "client certificate of another CA":
        cert, key = _foreign_client_certificate(tls_pki, tmp_path)
        config = {
            **_tls(secured_kafka),
            "ssl.certificate.location": str(cert),
            "ssl.key.location": str(key),
        }
    else:
        config = {**_tls(secured_kafka), "bootstrap.servers": kafka_bootstrap}
    said, lines = refused(config)
    assert said is not None, lines
    assert said.startswith(reason), (said, lines)
    assert setting in said, (said, lines)
    assert NODE_USER[1] not in said


@pytest.mark.parametrize(
    ("case", "reason", "setting"),
    [
        ("wrong password", SASL_REFUSED, "CHRONOS_KAFKA__SASL_PASSWORD"),
        # INFO lines only, one per connection: the start-up client's logger must take them
        ("plaintext client, TLS listener", PROTOCOL_MISMATCH, "CHRONOS_KAFKA__SECURITY_PROTOCOL"),
    ],
)
def test_start_up_names_the_refusal_from_its_own_client_s_lines(
    case: str,
    reason: str,
    setting: str,
    secured_kafka: SecuredBroker,
) -> None:
    if case == "wrong password":
        config = _scram(secured_kafka, NODE_USER[0], "not-" + NODE_USER[1])
    else:
        config = {"bootstrap.servers": secured_kafka.address("TLS")}
    bootstrap = config.pop("bootstrap.servers")
    properties: dict[str, str | Secret] = dict(config)
    if "sasl.password" in properties:
        properties["sasl.password"] = Secret(config["sasl.password"])
    topics = Topics("in", "out", "dead")  # never asked for: the broker refuses first
    settings = make_settings(UNUSED_DATABASE, bootstrap, topics, kafka_properties=properties)
    with pytest.raises(ConfigError) as raised:
        reach_broker(settings, timeout=WITHIN_S)
    said = str(raised.value)
    assert said.startswith(reason), said
    assert setting in said, said
    assert NODE_USER[1] not in said
