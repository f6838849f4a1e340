"""Several Apache Kafka nodes on this machine forming one KRaft quorum (``chronos dev
--brokers 3``, the scenarios that stop a broker).

Every node is broker and controller; the internal topics are replicated to every node (at most
3) with ``min.insync.replicas`` 2, and topics created without a replication factor get the same.
The nodes' pids are in ``log_dir/broker.pids``, one a line, in node order.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
import weakref
from pathlib import Path
from types import TracebackType

from chronos.embedded.kafka.broker import EmbeddedKafka, read_pids, stop_stray_node
from chronos.embedded.kafka.config import new_cluster_id, read_cluster_id
from chronos.errors import ChronosError

PIDS_FILE = "broker.pids"


class EmbeddedKafkaCluster:
    """``size`` nodes; node ``i`` (ids from 1) listens on ``port + i`` when ``port`` is given,
    else on a free port. Data in ``log_dir/kafka-<id>``, logs in ``log_dir/broker-<id>.log``."""

    def __init__(
        self,
        size: int = 3,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        log_dir: Path | None = None,
        die_with_parent: bool = True,
        auto_create_topics: bool = False,
        extra: dict[str, str] | None = None,
    ) -> None:
        if size < 1:
            raise ChronosError("a Kafka cluster needs at least one node")
        if log_dir is None:
            log_dir = Path(tempfile.mkdtemp(prefix="chronos-kafka-cluster-"))
            weakref.finalize(self, shutil.rmtree, str(log_dir), True)
        self.log_dir = Path(log_dir).absolute()
        self.host = host
        self.extra = dict(extra or {})  # further server properties of every node
        self.nodes = [
            EmbeddedKafka(
                port + i if port else 0,
                host=host,
                log_dir=self.log_dir,
                die_with_parent=die_with_parent,
                node_id=i + 1,
                auto_create_topics=auto_create_topics,
                pid_file=None,
                log_name=f"broker-{i + 1}.log",
                data_name=f"kafka-{i + 1}",
            )
            for i in range(size)
        ]

    @property
    def pids_path(self) -> Path:
        return self.log_dir / PIDS_FILE

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def pids(self) -> list[int | None]:
        return [node.pid for node in self.nodes]

    @property
    def running(self) -> bool:
        return all(node.running for node in self.nodes)

    def start(self, timeout: float = 90.0) -> str:
        """Start every node that is not running (a quorum needs a majority, so all are spawned
        before any is waited for); return the bootstrap list once each serves metadata."""
        self._stop_stale()
        self._prepare()
        waiting = [node for node in self.nodes if not node.running]
        for node in waiting:
            node.check_ports()  # before any JVM starts
        try:
            for node in waiting:
                node.spawn()
            self._write_pids()
            for node in waiting:
                node.wait_until_ready(timeout)
        except ChronosError:
            self.stop()
            raise
        return self.bootstrap

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM every node at once, wait up to ``timeout`` s for each, SIGKILL the rest."""
        for node in self.nodes:
            node.signal(signal.SIGTERM)
        for node in self.nodes:
            node.wait_stopped(timeout)
        self.pids_path.unlink(missing_ok=True)

    def restart(self) -> str:
        self.stop()
        return self.start()

    def stop_node(self, index: int, timeout: float = 15.0) -> None:
        """Stop node ``index`` (from 0) alone; the others go on."""
        self.nodes[index].stop(timeout)
        self._write_pids()

    def start_node(self, index: int, timeout: float = 90.0) -> None:
        """Start node ``index`` again (after :meth:`stop_node`) and wait until it serves."""
        self.nodes[index].start(timeout)
        self._write_pids()

    def _prepare(self) -> None:
        """Ports (kept for the object's life), the voters and one cluster id for every node."""
        for node in self.nodes:
            node.assign_ports()
        voters = [(node.node_id, node.controller_port) for node in self.nodes]
        known = [read_cluster_id(node.data_dir / "data") for node in self.nodes]
        cluster_id = next((c for c in known if c), None) or new_cluster_id()
        for node in self.nodes:
            node.voters = voters
            node.cluster_id = cluster_id
            node.replication = min(3, len(self.nodes))
            node.extra = self.extra

    def _write_pids(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.pids_path.write_text("".join(f"{node.pid or 0}\n" for node in self.nodes))

    def _stop_stale(self) -> None:
        if any(node.running for node in self.nodes):
            return
        for pid, node in zip(read_pids(self.pids_path), self.nodes, strict=False):
            stop_stray_node(pid, node.config_path)
        self.pids_path.unlink(missing_ok=True)

    def __enter__(self) -> EmbeddedKafkaCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
