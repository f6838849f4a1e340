"""What the embedded Apache Kafka runs with: its ``server.properties``, its Log4j2 configuration,
the JVM's options, and the command that formats its storage.

One JVM per node is broker and controller at once (KRaft). The quorum is static
(``controller.quorum.voters``): every node's controller endpoint is in its configuration, so a
node's storage is formatted without naming voters and a restart may render a new file.

Sized for a developer's machine or a test run: a bounded heap, two network and two I/O
threads, one partition for each internal topic, a small cleaner buffer, no initial rebalance
delay, and no automatic topic creation (the usual production setting: Chronos's tools and the
test suite create the topics they use).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chronos.embedded.kafka.security import BrokerSecurity, escape

HEAP = "384m"
"""The broker's maximum heap (``-Xmx``)."""

JVM_OPTIONS: tuple[str, ...] = (
    "-Xms64m",
    f"-Xmx{HEAP}",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExitOnOutOfMemoryError",
    "-XX:-OmitStackTraceInFastThrow",
    "-Djava.awt.headless=true",
)
"""As ``kafka-run-class.sh`` starts the broker (G1, short pauses), with a small heap."""

BROKER_LISTENER = "PLAINTEXT"
CONTROLLER_LISTENER = "CONTROLLER"

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
"""
"""Everything into one file (``{log}``): the broker's own log, in the data dir."""


@dataclass(frozen=True)
class NodeConfig:
    """One node of an embedded Kafka cluster (broker and controller in one process)."""

    node_id: int
    host: str
    port: int
    controller_port: int
    data_dir: Path
    voters: Sequence[tuple[int, int]] = ()  # (node id, controller port) of every node
    replication: int = 1  # replication of the internal topics (the node count, at most 3)
    auto_create_topics: bool = False
    extra: Mapping[str, str] = field(default_factory=dict)
    security: BrokerSecurity | None = None  # TLS and SASL_SSL listeners instead of PLAINTEXT

    @property
    def log_dirs(self) -> Path:
        return self.data_dir / "data"

    @property
    def formatted(self) -> bool:
        return (self.log_dirs / "meta.properties").exists()

    def quorum_voters(self) -> str:
        voters = self.voters or ((self.node_id, self.controller_port),)
        return ",".join(f"{node}@{self.host}:{port}" for node, port in voters)

    def properties(self) -> dict[str, str]:
        rf = str(self.replication)
        min_isr = str(min(2, self.replication))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.quorum_voters(),
            "listeners": (
                f"{BROKER_LISTENER}://{self.host}:{self.port},"
                f"{CONTROLLER_LISTENER}://{self.host}:{self.controller_port}"
            ),
            "advertised.listeners": f"{BROKER_LISTENER}://{self.host}:{self.port}",
            "controller.listener.names": CONTROLLER_LISTENER,
            "inter.broker.listener.name": BROKER_LISTENER,
            "listener.security.protocol.map": (
                f"{BROKER_LISTENER}:PLAINTEXT,{CONTROLLER_LISTENER}:PLAINTEXT"
            ),
            "log.dirs": str(self.log_dirs),
            "auto.create.topics.enable": str(self.auto_create_topics).lower(),
            "num.partitions": "1",
            "default.replication.factor": rf,
            "min.insync.replicas": min_isr,
            # few threads: a developer's machine or a test run with a few clients
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "num.replica.fetchers": "1",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(2 * 1024 * 1024),
            # one partition for each internal topic, replicated as far as the nodes allow
            "offsets.topic.num.partitions": "1",
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.num.partitions": "1",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            # A new group forms at once (Kafka waits 3 s for more members): only an empty
            # group's first assignment waits for it, never a failover or a rebalance of a group
            # that has members, and a test or a development stack starts new groups all day.
            # Scenario 21's cluster runs Kafka's 3 s.
            "group.initial.rebalance.delay.ms": "0",
            # A dead broker is fenced at Kafka's defaults (broker.session.timeout.ms 9 s,
            # heartbeats every 2 s): what users' clusters do, and what Chronos's own defaults
            # (delivery timeout, consumer session) are chosen to ride out.
        }
        if self.security is not None:
            props.update(self._secured())
        props.update(self.extra)
        return props

    def _secured(self) -> dict[str, str]:
        """The listeners of a secured node: its TLS and SASL_SSL ones, the controller's."""
        assert self.security is not None
        urls = self.security.listener_urls(self.host)
        return {
            "listeners": f"{urls},{CONTROLLER_LISTENER}://{self.host}:{self.controller_port}",
            "advertised.listeners": urls,
            "inter.broker.listener.name": self.security.inter_broker_listener,
            "listener.security.protocol.map": (
                f"{self.security.protocol_map()},{CONTROLLER_LISTENER}:PLAINTEXT"
            ),
            **self.security.properties(),
        }

    def render(self) -> str:
        return "".join(f"{key}={escape(value)}\n" for key, value in self.properties().items())


def new_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (as
    ``kafka-storage random-uuid`` makes them)."""
    while True:
        raw = os.urandom(16)
        if raw[0] & 0x80 == 0 and any(raw):  # Kafka rejects ids that start with '-' or are zero
            text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
            if not text.startswith("-"):
                return text


def read_cluster_id(log_dirs: Path) -> str | None:
    """The ``cluster.id`` a formatted storage holds, or None."""
    try:
        text = (log_dirs / "meta.properties").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "cluster.id":
            return value.strip()
    return None


def java_command(
    java: str,
    classpath: str,
    main: str,
    args: Sequence[str],
    log4j2: Path,
    *,
    tool: bool = False,
    extra: Sequence[str] = (),
) -> list[str]:
    """``java`` running ``main`` from ``classpath`` with our JVM options (a short-lived
    ``tool``: a small heap, the quick compiler only), ``extra`` and the Log4j2 file."""
    options = ["-Xmx128m", "-XX:TieredStopAtLevel=1"] if tool else list(JVM_OPTIONS)
    return [
        java, *options, *extra, f"-Dlog4j2.configurationFile={log4j2}",
        "-cp", classpath, main, *args,
    ]  # fmt: skip


def format_args(
    config_file: Path, cluster_id: str, security: BrokerSecurity | None = None
) -> list[str]:
    """``kafka.tools.StorageTool``'s arguments formatting a node of a static quorum (with the
    SCRAM users of ``security``)."""
    users = security.format_args() if security is not None else []
    return ["format", "-t", cluster_id, "-c", str(config_file), "--ignore-formatted", *users]
