"""One place builds every Kafka client's configuration (``chronos.kafka.config``), so a security
setting (``security.protocol``, ``sasl.*``, ``ssl.*``) given once reaches every client a node and
the command line create. The first test finds every construction of a confluent-kafka client in
the package's source and checks where its configuration comes from; the second that every builder
carries the security settings unchanged (the secret revealed only to the client)."""

from __future__ import annotations

import ast
from pathlib import Path

import chronos
from chronos.config.settings import Secret
from chronos.kafka import config as clients
from tests.unit.helpers import settings as unit_settings

PACKAGE = Path(chronos.__file__).parent
CLIENT_CLASSES = {"Producer", "Consumer", "AdminClient"}
BUILDERS = {
    "admin_config",
    "producer_config",
    "consumer_config",
    "import_producer_config",
    "tail_consumer_config",
    "_common",
}
EXEMPT = {
    # The embedded brokers' own readiness checks, on their plaintext port: no user settings apply.
    "embedded/kafka/broker.py",
    "embedded/tansu.py",
    # The dev stack's topics, created with the client properties the stack gives (its TLS ones).
    "embedded/topics.py",
}
# Classes that build a client from the configuration they are given: their own constructions
# are checked where they are built instead.
WRAPPERS = {"KafkaPublisher": "self._config"}
SECURITY = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanisms": "SCRAM-SHA-512",
    "sasl.username": "chronos",
    "ssl.ca.location": "/etc/chronos/kafka-tls/ca.crt",
}
PASSWORD = "never-in-a-log-line"


def _confluent_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("confluent_kafka"):
            names |= {a.asname or a.name for a in node.names if a.name in CLIENT_CLASSES}
    return names


def _assigned(tree: ast.Module) -> dict[str, list[str]]:
    """Every assignment's target text -> the text of the values assigned to it."""
    values: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                values.setdefault(ast.unparse(target), []).append(ast.unparse(node.value))
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            values.setdefault(ast.unparse(node.target), []).append(ast.unparse(node.value))
    return values


def _from_builder(text: str) -> bool:
    return any(f"{name}(" in text for name in BUILDERS)


def client_constructions() -> list[tuple[str, int, str, str]]:
    """(module, line, class, configuration argument) of every confluent-kafka client built."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = str(path.relative_to(PACKAGE))
        tree = ast.parse(path.read_text())
        names = _confluent_names(tree) | set(WRAPPERS)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in names
                and node.args
            ):
                found.append((module, node.lineno, node.func.id, ast.unparse(node.args[0])))
    return found


def test_every_kafka_client_takes_its_configuration_from_the_one_place() -> None:
    constructions = client_constructions()
    modules = {module for module, *_ in constructions}
    # The node (publishers, consumer, start-up check and preflight, broker probe, readiness),
    # chronos import, the producer's commands (schedule, reschedule, cancel, tail) and the
    # dead-letter commands: if this set shrinks, the scan has gone blind.
    assert {
        "kafka/clients.py",
        "kafka/startup.py",
        "kafka/probe.py",
        "node/http.py",
        "importer.py",
        "produce.py",
        "admin/deadletters/topic.py",
    } <= modules, modules
    for module, line, kind, argument in constructions:
        if module in EXEMPT or argument in WRAPPERS.values():
            continue
        tree = ast.parse((PACKAGE / module).read_text())
        sources = [argument, *_assigned(tree).get(argument, [])]
        assert any(_from_builder(text) for text in sources), (
            f"{module}:{line}: {kind}({argument}) is not configured by chronos.kafka.config"
        )


def test_every_builder_carries_the_security_settings() -> None:
    properties: dict[str, str | Secret] = {**SECURITY, "sasl.password": Secret(PASSWORD)}
    settings = unit_settings(kafka_properties=properties)
    configs = {
        "admin": clients.admin_config(settings),
        "firing producer": clients.producer_config(settings, "firing"),
        "intake producer": clients.producer_config(settings, "intake"),
        "cli producer": clients.producer_config(settings, "cli"),
        "replay producer": clients.producer_config(settings, "replay"),
        "intake consumer": clients.consumer_config(settings),
        "import producer": clients.import_producer_config(settings),
        "tail consumer": clients.tail_consumer_config(settings, "tail-group"),
    }
    for name, config in configs.items():
        for key, value in SECURITY.items():
            assert config.get(key) == value, (name, key)
        assert config["sasl.password"] == PASSWORD, name  # revealed to the client alone
    assert PASSWORD not in repr(settings) and PASSWORD not in str(settings.kafka_properties)
