"""Apache Kafka on this machine, for ``chronos dev`` and the test suite: one node, or a cluster
of nodes forming one KRaft quorum, each node a JVM that is broker and controller at once.

The jars come from :mod:`chronos.embedded.kafka.jars`, the configuration from
:mod:`chronos.embedded.kafka.config`. A node keeps its topics and records in its data dir, so a
restart loses nothing. Its log goes to ``log_dir/broker.log`` (``broker-<id>.log`` in a
cluster); with a ``log_dir`` a pid file there lets the next start stop a node a killed run left
behind. With ``die_with_parent`` the node gets SIGKILL when the process that started it dies.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from types import TracebackType

from confluent_kafka.admin import AdminClient

from chronos.embedded import launcher
from chronos.embedded.kafka import config as kafka_config
from chronos.embedded.kafka import jars as kafka_jars
from chronos.embedded.kafka.security import BrokerSecurity
from chronos.embedded.process import (
    _alive,
    _cmdline,
    _kill_stray,
    _port_accepts,
    _tail,
    free_port,
    port_free,
)
from chronos.errors import ChronosError, PortInUse

log = logging.getLogger(__name__)

MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"


class EmbeddedKafka:
    """One Apache Kafka node (broker and controller) on ``host:port``.

    ``log_dir``: where its data (``kafka/`` or ``kafka-<id>/``), log and pid file live (else a
    temporary directory, removed when the object is collected).
    ``voters``/``cluster_id``/``replication``: set by :class:`EmbeddedKafkaCluster`.
    ``security``: TLS and SASL_SSL listeners (with fixed ports) instead of the plaintext one;
    the bootstrap address is then the first one's, reached with the librdkafka settings
    ``client`` (a client certificate the CA signed).
    """

    def __init__(
        self,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        log_dir: Path | None = None,
        die_with_parent: bool = True,
        node_id: int = 1,
        controller_port: int = 0,
        auto_create_topics: bool = False,
        pid_file: str | None = "broker.pid",
        log_name: str = "broker.log",
        data_name: str = "kafka",
        security: BrokerSecurity | None = None,
        client: dict[str, str] | None = None,
    ) -> None:
        self.host = host
        self.security = security
        self.client = dict(client or {})
        if security is not None:
            port = security.listeners[0].port
        self._port = port
        self.node_id = node_id
        self.controller_port = controller_port
        self.auto_create_topics = auto_create_topics
        if log_dir is None:
            log_dir = Path(tempfile.mkdtemp(prefix="chronos-kafka-"))
            weakref.finalize(self, shutil.rmtree, str(log_dir), True)
        self.log_dir = Path(log_dir).absolute()
        self.data_dir = self.log_dir / data_name
        self.log_path = self.log_dir / log_name
        self.pid_path = self.log_dir / pid_file if pid_file else None
        self.die_with_parent = die_with_parent
        self.voters: list[tuple[int, int]] = []
        self.cluster_id: str | None = None
        self.replication = 1
        self.extra: dict[str, str] = {}  # further server properties (a test's broker tuning)
        self._proc: subprocess.Popen[bytes] | None = None
        self._archive_draft: tuple[Path, Path] | None = None

    # ------------------------------------------------------------------ state

    @property
    def port(self) -> int:
        return self._port

    @property
    def bootstrap(self) -> str:
        if not self._port:
            raise ChronosError("EmbeddedKafka has no port until start()")
        return f"{self.host}:{self._port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    @property
    def config_path(self) -> Path:
        return self.data_dir / "server.properties"

    def config(self) -> kafka_config.NodeConfig:
        return kafka_config.NodeConfig(
            node_id=self.node_id,
            host=self.host,
            port=self._port,
            controller_port=self.controller_port,
            data_dir=self.data_dir,
            voters=tuple(self.voters),
            replication=self.replication,
            auto_create_topics=self.auto_create_topics,
            extra=self.extra,
            security=self.security,
        )

    # ------------------------------------------------------------------ life cycle

    def start(self, timeout: float = 60.0) -> str:
        """Start the node; return its bootstrap address once it serves metadata."""
        if self.running:
            return self.bootstrap
        self.spawn()
        self.wait_until_ready(timeout)
        return self.bootstrap

    def spawn(self) -> None:
        """Format the storage if needed and start the JVM, without waiting for it."""
        if self.running:
            return
        self.stop_stale()
        self.assign_ports()
        self.check_ports()
        java, libs = kafka_jars.java_binary(), kafka_jars.jar_dir()
        classpath = str(libs / "*")
        kind = "secured" if self.security is not None else ""
        sharing = self._class_sharing(kafka_jars.class_archive(libs, java, kind))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.config()
        self.config_path.write_text(config.render())
        log4j2 = self.data_dir / "log4j2.properties"
        log4j2.write_text(kafka_config.LOG4J2.format(log=self.log_path))
        if not config.formatted:
            self._format(java, classpath, log4j2)
        command = kafka_config.java_command(
            java, classpath, MAIN_CLASS, [str(self.config_path)], log4j2, extra=sharing
        )
        self._proc = self._popen(command)
        if self.pid_path is not None:
            self.pid_path.write_text(f"{self._proc.pid}\n")

    def _class_sharing(self, archive: Path) -> list[str]:
        """The JVM option that uses the class archive, or makes it when this node exits (into
        a file of its own, moved into place by :meth:`wait_stopped` after a clean exit)."""
        if archive.exists():
            self._archive_draft = None
            return [f"-XX:SharedArchiveFile={archive}"]
        draft = archive.with_name(f"{archive.stem}.{os.getpid()}-{self.node_id}.partial")
        self._archive_draft = (draft, archive)
        return [f"-XX:ArchiveClassesAtExit={draft}"]

    def _keep_archive(self, code: int) -> None:
        if self._archive_draft is None:
            return
        draft, archive = self._archive_draft
        self._archive_draft = None
        if code in (0, 143) and draft.exists() and draft.stat().st_size > 0:
            os.replace(draft, archive)
        else:
            draft.unlink(missing_ok=True)

    def assign_ports(self) -> None:
        """Pick free ports for the listeners not given (kept for the object's life)."""
        if not self._port:
            self._port = free_port(self.host)
        if not self.controller_port:
            self.controller_port = free_port(self.host)

    @property
    def ports(self) -> list[int]:
        """Every port the node listens on: its client listeners, then the controller's."""
        clients = [lst.port for lst in self.security.listeners] if self.security else [self._port]
        return [*clients, self.controller_port]

    def check_ports(self) -> None:
        """PortInUse, before the JVM starts, when another process holds one of the ports."""
        for port in self.ports:
            if not port_free(port, self.host):
                raise PortInUse(
                    f"Kafka node {self.node_id} cannot listen on {self.host}:{port}: "
                    "another process holds that port",
                    port,
                )

    def _popen(self, command: list[str]) -> subprocess.Popen[bytes]:
        if self.die_with_parent:
            name = f"kafka node {self.node_id}"
            return launcher.launch(
                name, command, env=launcher.child_environment(), log_path=self.log_path
            ).process
        with self.log_path.open("ab") as out:
            return subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _format(self, java: str, classpath: str, log4j2: Path) -> None:
        cluster_id = self.cluster_id or kafka_config.new_cluster_id()
        args = kafka_config.format_args(self.config_path, cluster_id, self.security)
        command = kafka_config.java_command(java, classpath, STORAGE_TOOL, args, log4j2, tool=True)
        result = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, timeout=120, check=False
        )
        if result.returncode != 0 or not self.config().formatted:
            output = (result.stdout + result.stderr).decode(errors="replace")[-2000:]
            raise ChronosError(
                f"formatting the Kafka storage in {self.data_dir} failed "
                f"(exit {result.returncode}):\n{output}"
            )
        self.cluster_id = cluster_id

    def wait_until_ready(self, timeout: float = 60.0) -> None:
        """Return once the node answers a metadata request that lists it; raise if it exits
        or ``timeout`` s pass (then it is stopped)."""
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        problem = "the port never accepted connections"
        admin: AdminClient | None = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                self._keep_archive(-1)
                raise ChronosError(
                    f"Kafka node {self.node_id} exited with code {code} during start-up "
                    f"(port {self._port} in use?); log {self.log_path}:\n{_tail(self.log_path)}"
                )
            if _port_accepts(self.host, self._port):
                admin = admin or AdminClient(
                    {
                        "bootstrap.servers": self.bootstrap,
                        "socket.connection.setup.timeout.ms": 5000,
                        **self.client,
                    }
                )
                try:
                    brokers = admin.list_topics(timeout=5).brokers
                except Exception as exc:  # noqa: BLE001 - any failure means "not yet"
                    problem = f"metadata request failed: {exc}"
                else:
                    if self.node_id in brokers:
                        log.info(
                            "Apache Kafka node %s ready on %s (pid %s)",
                            self.node_id,
                            self.bootstrap,
                            self.pid,
                            extra={"event": "dev_broker_started"},
                        )
                        return
                    problem = f"node {self.node_id} not yet registered ({sorted(brokers)})"
            time.sleep(0.1)
        self.stop()
        raise ChronosError(
            f"Kafka node {self.node_id} on {self.bootstrap} was not ready within {timeout:.0f} s "
            f"({problem}); log {self.log_path}:\n{_tail(self.log_path)}"
        )

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (a clean shutdown: the next start needs no log recovery), then SIGKILL
        after ``timeout`` s (a minute when the JVM writes its class archive as it exits). The
        data stays."""
        self.signal(signal.SIGTERM)
        self.wait_stopped(timeout)

    def _stop_timeout(self, timeout: float) -> float:
        return max(timeout, 60.0) if self._archive_draft is not None else timeout

    def signal(self, sig: signal.Signals) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(sig)

    def wait_stopped(self, timeout: float) -> None:
        if self._proc is None:
            return
        timeout = self._stop_timeout(timeout)
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning(
                "Kafka node %s did not stop within %.0f s; killing it",
                self.node_id,
                timeout,
                extra={"event": "dev_process_killed"},
            )
            self._proc.kill()
            self._proc.wait()
        self._keep_archive(self._proc.returncode)
        self._proc = None
        if self.pid_path is not None:
            self.pid_path.unlink(missing_ok=True)

    def restart(self) -> str:
        """Stop and start again on the same ports; topics and records stay."""
        self.stop()
        return self.start()

    def stop_stale(self) -> None:
        """Stop a node a previous run left behind (its pid in the pid file, same config)."""
        if self.pid_path is None:
            return
        for pid in read_pids(self.pid_path):
            stop_stray_node(pid, self.config_path)
        self.pid_path.unlink(missing_ok=True)

    def __enter__(self) -> EmbeddedKafka:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def read_pids(path: Path) -> list[int]:
    """The pids in a pid file (one a line); [] when there is none."""
    try:
        lines = path.read_text().split()
    except OSError:
        return []
    return [int(line) for line in lines if line.isdigit()]


def stop_stray_node(pid: int, config_path: Path) -> None:
    """SIGTERM (then SIGKILL) ``pid`` if it is a Kafka node running ``config_path``."""
    command = _cmdline(pid)
    if _alive(pid) and MAIN_CLASS in command and str(config_path) in command:
        log.warning(
            "stopping a stale Kafka node (pid %s) a previous run left running",
            pid,
            extra={"event": "dev_broker_stale"},
        )
        _kill_stray(pid, signal.SIGTERM, 15.0)
