"""The secured embedded broker's configuration: its own TLS and SASL_SSL listeners with PEM key
stores, SCRAM users made by the storage format, the standard authorizer; and the SCRAM setup
docs/configuration.md shows is the one the suite runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chronos.embedded.kafka import config as kafka_config
from chronos.embedded.kafka.security import BrokerSecurity, TlsListener
from tests.support import tls as suite_tls

ROOT = Path(__file__).resolve().parents[3]
CONFIGURATION = ROOT / "docs" / "configuration.md"

CERT = "-----BEGIN CERTIFICATE-----\nMIIB\nAAAA\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"


def _security(tmp_path: Path, **kwargs: object) -> BrokerSecurity:
    (tmp_path / "c.pem").write_text(CERT)
    (tmp_path / "c.key").write_text(KEY)
    (tmp_path / "ca.pem").write_text(CERT)
    cert, key = tmp_path / "c.pem", tmp_path / "c.key"
    listeners = [
        TlsListener("TLS", 9093, cert, key),
        TlsListener("SCRAM", 9094, cert, key, sasl=True),
    ]
    return BrokerSecurity(listeners, tmp_path / "ca.pem", **kwargs)  # type: ignore[arg-type]


def _parse(rendered: str) -> dict[str, str]:
    """As java.util.Properties reads the file (the escapes the renderer writes)."""
    props = {}
    for line in rendered.splitlines():
        key, _, value = line.partition("=")
        props[key] = value.replace("\\n", "\n").replace("\\\\", "\\")
    return props


def test_a_secured_node_listens_on_tls_and_sasl_ssl_only(tmp_path: Path) -> None:
    node = kafka_config.NodeConfig(
        1, "127.0.0.1", 9093, 9097, tmp_path, security=_security(tmp_path)
    )
    props = _parse(node.render())
    assert props["listeners"] == (
        "TLS://127.0.0.1:9093,SCRAM://127.0.0.1:9094,CONTROLLER://127.0.0.1:9097"
    )
    assert props["advertised.listeners"] == "TLS://127.0.0.1:9093,SCRAM://127.0.0.1:9094"
    assert props["listener.security.protocol.map"] == (
        "TLS:SSL,SCRAM:SASL_SSL,CONTROLLER:PLAINTEXT"
    )
    assert props["inter.broker.listener.name"] == "TLS"
    assert "PLAINTEXT://" not in props["listeners"]
    assert props["listener.name.tls.ssl.client.auth"] == "required"
    assert props["listener.name.scram.ssl.client.auth"] == "none"
    assert props["listener.name.tls.ssl.keystore.type"] == "PEM"
    assert props["listener.name.tls.ssl.keystore.certificate.chain"] == CERT.strip()
    assert props["listener.name.tls.ssl.keystore.key"] == KEY.strip()
    assert props["listener.name.tls.ssl.truststore.type"] == "PEM"
    assert props["listener.name.tls.ssl.truststore.certificates"] == CERT.strip()
    assert props["listener.name.scram.sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert "authorizer.class.name" not in props


def test_the_pem_text_stays_on_one_line_of_the_properties_file(tmp_path: Path) -> None:
    node = kafka_config.NodeConfig(
        1, "127.0.0.1", 9093, 9097, tmp_path, security=_security(tmp_path)
    )
    lines = node.render().splitlines()
    assert all("=" in line for line in lines)
    assert not any(line.startswith(("MIIB", "-----END")) for line in lines)


def test_scram_users_are_made_by_the_storage_format(tmp_path: Path) -> None:
    security = _security(tmp_path, users={"admin": "a-secret", "chronos": "c-secret"})
    args = kafka_config.format_args(tmp_path / "server.properties", "id", security)
    assert args[-4:] == [
        "--add-scram",
        "SCRAM-SHA-512=[name=admin,password=a-secret]",
        "--add-scram",
        "SCRAM-SHA-512=[name=chronos,password=c-secret]",
    ]


@pytest.mark.parametrize(
    "users",
    [{"a,b": "x"}, {"a": "x]y"}, {"": "x"}, {"a": ""}],
    ids=["comma", "bracket", "", "no pw"],
)
def test_a_scram_user_the_format_cannot_take_is_refused(
    tmp_path: Path, users: dict[str, str]
) -> None:
    with pytest.raises(ValueError, match="SCRAM user"):
        _security(tmp_path, users=users)


def test_a_scram_listener_cannot_come_first(tmp_path: Path) -> None:
    cert = tmp_path / "c.pem"
    with pytest.raises(ValueError, match="TLS listener first"):
        BrokerSecurity([TlsListener("SCRAM", 1, cert, cert, sasl=True)], cert)


def test_acls_turn_on_the_standard_authorizer_with_the_brokers_own_principals(
    tmp_path: Path,
) -> None:
    props = _security(tmp_path, acls=True, super_users=["User:admin"]).properties()
    assert props["authorizer.class.name"] == (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    )
    assert props["super.users"] == "User:ANONYMOUS;User:CN=localhost;User:admin"
    assert props["allow.everyone.if.no.acl.found"] == "false"


def _block_after(marker: str, language: str) -> str:
    text = CONFIGURATION.read_text()
    start = text.index(marker)
    match = re.search(rf"```{language}\n(.*?)```", text[start:], re.S)
    assert match, f"no ```{language} block after {marker!r} in docs/configuration.md"
    return match.group(1)


def test_the_documented_scram_setup_is_the_one_the_suite_runs(tmp_path: Path) -> None:
    """docs/configuration.md's production sample: the SCRAM mechanism, its login module, the
    authorizer and its default-deny as ``tests/support/tls.py``'s secured broker runs them, and
    what the suite's one-machine broker has that a production one must not (a plaintext
    listener, an unauthenticated super user) absent from it."""
    marker = "A broker with TLS, SCRAM users and ACLs."
    server = _block_after(marker, "properties")
    documented = dict(
        line.split("=", 1) for line in server.splitlines() if line and not line.startswith("#")
    )
    security = _security(tmp_path, acls=True, super_users=[f"User:{suite_tls.ADMIN[0]}"])
    props = security.properties()
    sasl_listener = next(
        name.split(":")[0].lower()
        for name in documented["listener.security.protocol.map"].split(",")
        if name.endswith(":SASL_SSL")
    )
    suite_sasl = next(k for k in props if k.endswith(".sasl.enabled.mechanisms") and ".name." in k)
    suite_jaas = next(k for k in props if k.endswith(".sasl.jaas.config"))
    assert documented[f"listener.name.{sasl_listener}.sasl.enabled.mechanisms"] == props[suite_sasl]
    assert (
        documented[f"listener.name.{sasl_listener}.scram-sha-512.sasl.jaas.config"]
        == props[suite_jaas]
    )
    for key in ("authorizer.class.name", "allow.everyone.if.no.acl.found"):
        assert documented[key] == props[key], key
    assert "PLAINTEXT" not in documented["listener.security.protocol.map"]
    assert "ANONYMOUS" not in documented["super.users"]
    assert set(suite_tls.LISTENERS) >= {"TLS", "SCRAM"}

    format_block = _block_after(marker, "sh")
    assert f"'SCRAM-SHA-512=[name={suite_tls.ADMIN[0]}," in format_block

    client_block = _block_after("Every Chronos command then takes:", "sh")
    documented_env = dict(line.split("=", 1) for line in client_block.split())
    suite = suite_tls.scram_client_properties(*suite_tls.NODE_USER, ca=Path("/ca.pem"))
    from chronos.config.settings import passthrough_env

    for name, value in suite.items():
        env = passthrough_env(name)
        assert env in documented_env, env
        if name not in ("ssl.ca.location", "sasl.password"):  # paths and secrets are yours
            assert documented_env[env] == value, env
