"""The benchmark's own stack: embedded Postgres and broker, node and relay processes, and the
launcher that ties every child's life to the benchmark's."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtest.bench.results import Preload

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 90.0
SESSION_TIMEOUT_MS = "6000"
MB = 1024 * 1024


# Children start through this launcher: it asks Linux to signal the child when the benchmark
# dies (so nothing outlives a killed run), then execs the real command. A preexec_fn would do the
# same, but is unsafe in a process that runs threads.
_LAUNCHER = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, int(sys.argv[1]), 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[2]):\n"
    "    os._exit(70)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[3:]])\n"
)


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOS_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def launch(
    args: Sequence[str],
    *,
    log_path: Path,
    env: dict[str, str],
    death_signal: signal.Signals = signal.SIGKILL,
) -> subprocess.Popen[bytes]:
    """``python <args>`` from the repository root, output to ``log_path``."""
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(int(death_signal)), str(os.getpid()), *args],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


_PARTITION_RE = re.compile(r"'([^'\[\]]+)\[(\d+)\]'")


def read_text(path: str) -> str | None:
    """A file's text, None if it cannot be read (not there yet)."""
    try:
        return Path(path).read_text()
    except OSError:
        return None


@dataclass
class NodeProcess:
    """One ``python -m chronos run`` process."""

    index: int
    settings: Any  # chronos.settings.Settings
    process: subprocess.Popen[bytes]
    log_path: Path
    _offset: int = 0
    _partial: bytes = b""
    _held: set[int] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def port(self) -> int:
        return int(self.settings.http_port)

    def alive(self) -> bool:
        return self.process.poll() is None

    def _get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        if not self.port:
            raise urllib.error.URLError("no HTTP server")
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, ""

    def ready(self) -> bool:
        try:
            return self._get("/health/ready", 2.0)[0] == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def metrics_text(self) -> str:
        try:
            return self._get("/metrics")[1]
        except (urllib.error.URLError, OSError, ValueError):
            return ""

    def assignment(self, topic: str) -> set[int]:
        """Input partitions held now, from the node's ``partitions_assigned/revoked`` events."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return set(self._held)
        self._offset += len(chunk)
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        for raw in complete:
            if not raw.startswith(b"{"):
                continue
            try:
                event = json.loads(raw)
            except ValueError:
                continue
            kind = event.get("event")
            if kind not in ("partitions_assigned", "partitions_revoked"):
                continue
            parts = {
                int(p) for t, p in _PARTITION_RE.findall(event.get("message", "")) if t == topic
            }
            if kind == "partitions_assigned":
                self._held |= parts
            else:
                self._held -= parts
        return set(self._held)

    def stop(self, timeout: float) -> int | None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)
            return None


@dataclass(frozen=True)
class Topics:
    input: str
    output: str
    dead_letter: str
    group: str

    def all(self) -> list[str]:
        return [self.input, self.output, self.dead_letter]


SAMPLE_SQL = """
SELECT
  (SELECT count(*) FROM chronos_messages
    WHERE readied_at IS NULL AND deadline < now() + interval '1 day') AS waiting,
  (SELECT count(*) FROM chronos_messages WHERE readied_at IS NOT NULL) AS claimed,
  (SELECT count(*) FROM chronos_messages WHERE readied_at IS NULL AND deadline < now()) AS overdue,
  (SELECT extract(epoch FROM now() - min(deadline))::float8 FROM chronos_messages
    WHERE readied_at IS NULL AND deadline < now()) AS oldest_overdue_s
"""
"""What the sampler reads every second. Pre-loaded rows (days ahead) are never counted: the
partial ``due`` index range stops at ``now() + 1 day``."""

PRELOAD_SQL = """
INSERT INTO chronos_messages (id, deadline, message_key, message_value, message_headers)
SELECT 'preload-' || g,
       now() + interval '7 days' + g * interval '1 millisecond',
       convert_to('key-' || (g %% 1000), 'UTF8'),
       %(value)s::bytea,
       '[{"trace": "MQ=="}]'::jsonb
FROM generate_series(1::bigint, %(rows)s::bigint) AS g
"""
"""Far-future rows (7 days ahead, one per millisecond after that): they never fire."""


class Stack:
    """Embedded Postgres and broker on free ports, plus the node processes of one scenario."""

    def __init__(
        self, data_dir: Path, logs_dir: Path, partitions: int, node_env: dict[str, str]
    ) -> None:
        self.data_dir = data_dir
        self.logs_dir = logs_dir
        self.partitions = partitions
        self.node_env = node_env
        self.postgres: Any = None
        self.broker: Any = None
        self.url = ""
        self.bootstrap = ""
        self.nodes: list[NodeProcess] = []

    def start(self) -> None:
        from chronos import migrate
        from chronos.embedded import EmbeddedBroker, EmbeddedPostgres

        self.postgres = EmbeddedPostgres(self.data_dir / "postgres", 0, durable=True)
        self.url = self.postgres.start()
        self.broker = EmbeddedBroker(0, log_dir=self.logs_dir)
        self.bootstrap = self.broker.start()
        migrate.upgrade(self.url)

    @property
    def postgres_pid(self) -> int | None:
        return None if self.postgres is None else self.postgres.pid

    @property
    def broker_pid(self) -> int | None:
        return None if self.broker is None else self.broker.pid

    def sql(self, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else []

    def postgres_version(self) -> str | None:
        try:
            return str(self.sql("SHOW server_version")[0][0])
        except Exception:  # noqa: BLE001 - a fact for the report, nothing more
            return None

    def topics(self, name: str) -> Topics:
        from chronos.embedded import create_topics

        topics = Topics(
            f"bench-{name}-input",
            f"bench-{name}-output",
            f"bench-{name}-dead-letter",
            f"bench-{name}",
        )
        create_topics(self.bootstrap, {t: self.partitions for t in topics.all()})
        return topics

    def fresh_broker(self) -> None:
        """Restart the in-memory broker (same port): every scenario starts on an empty one, so
        none inherits the records, topics or housekeeping of the one before."""
        if self.broker is not None and self.broker.running:
            self.bootstrap = self.broker.restart()

    def reset_table(self) -> None:
        self.sql("TRUNCATE chronos_messages")
        self.sql("DELETE FROM chronos_nodes")

    def preload(self, rows: int, payload_bytes: int = 100) -> Preload:
        started = time.monotonic()
        self.sql(PRELOAD_SQL, {"rows": rows, "value": b"p" * payload_bytes})
        inserted = time.monotonic() - started
        self.sql("VACUUM (ANALYZE) chronos_messages")
        self.sql("CHECKPOINT")
        size = self.sql("SELECT pg_total_relation_size('chronos_messages')")[0][0]
        return Preload(
            rows=rows,
            insert_s=round(inserted, 1),
            seconds=round(time.monotonic() - started, 1),
            table_mb=round(int(size) / MB, 1),
        )

    def node_settings(self, topics: Topics) -> Any:
        from chronos import settings as chronos_settings

        return chronos_settings.load(
            None,
            environ=dict(self.node_env),
            input_topic=topics.input,
            output_topic=topics.output,
            dead_letter_topic=topics.dead_letter,
            consumer_group=topics.group,
            http_host="127.0.0.1",
            log_format="json",
        )

    def start_nodes(self, count: int, topics: Topics, log_dir: Path) -> list[NodeProcess]:
        from chronos import settings as chronos_settings
        from chronos.dev import DEV_SESSION_TIMEOUT_MS, node_settings
        from chronos.embedded import free_port

        assert DEV_SESSION_TIMEOUT_MS == SESSION_TIMEOUT_MS
        base = self.node_settings(topics)
        for index in range(count):
            # node_settings gives node `index` the port base + index and a fresh node id.
            port = free_port()
            settings = node_settings(base, self.url, self.bootstrap, index, port - index)
            env = clean_env(chronos_settings.as_environment(settings))
            log_path = log_dir / f"node-{index}.log"
            process = launch(["-m", "chronos", "run"], log_path=log_path, env=env)
            self.nodes.append(NodeProcess(index, settings, process, log_path))
        return list(self.nodes)

    def start_relay(self, topics: Topics, log_dir: Path, timeout: float = 60.0) -> NodeProcess:
        """The harness's echo relay in place of a node (no HTTP server, no database)."""
        import types

        settings = types.SimpleNamespace(http_port=0, timing_advance_ms=50)
        argv = ["-m", "loadtest", "relay", "--bootstrap", self.bootstrap,
                "--input-topic", topics.input, "--output-topic", topics.output,
                "--dead-letter-topic", topics.dead_letter,
                "--timing-advance-ms", str(settings.timing_advance_ms)]  # fmt: skip
        log_path = log_dir / "relay.log"
        node = NodeProcess(0, settings, launch(argv, log_path=log_path, env=clean_env()), log_path)
        self.nodes.append(node)
        limit = time.monotonic() + timeout
        while "relay running" not in (read_text(str(log_path)) or ""):
            if not node.alive() or time.monotonic() > limit:
                raise RuntimeError(f"the echo relay did not start; see {log_path}")
            time.sleep(0.1)
        return node

    def wait_ready(
        self, nodes: Sequence[NodeProcess], topics: Topics, timeout: float = READY_TIMEOUT_S
    ) -> None:
        """Every node answers /health/ready, and the group holds every input partition (each
        node some), unchanged for a second."""
        limit = time.monotonic() + timeout
        pending = list(nodes)
        while pending:
            for node in list(pending):
                if not node.alive():
                    raise RuntimeError(
                        f"node {node.index} exited with {node.process.poll()} "
                        f"before it was ready; see {node.log_path}"
                    )
                if node.ready():
                    pending.remove(node)
            if time.monotonic() > limit:
                raise RuntimeError(f"nodes {[n.index for n in pending]} not ready in {timeout} s")
            if pending:
                time.sleep(0.2)
        wanted = set(range(self.partitions))
        settled: float | None = None
        last: list[set[int]] | None = None
        while True:
            held = [n.assignment(topics.input) for n in nodes]
            union = set().union(*held)
            good = (
                union == wanted
                and sum(len(h) for h in held) == len(union)
                and (all(held) or len(nodes) > len(wanted))
            )
            now = time.monotonic()
            if good and held == last:
                settled = settled or now
                if now - settled >= 1.0:
                    return
            else:
                settled = None
            last = held
            if now > limit:
                raise RuntimeError(f"consumer group did not settle in {timeout} s: {held}")
            if any(not n.alive() for n in nodes):
                raise RuntimeError("a node exited while the consumer group was settling")
            time.sleep(0.2)

    def stop_nodes(self) -> dict[int, int | None]:
        codes: dict[int, int | None] = {}
        timeout = 20.0
        for node in self.nodes:
            if node.alive():
                with contextlib.suppress(ProcessLookupError):
                    node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            codes[node.index] = node.stop(timeout)
        self.nodes = []
        return codes

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.stop_nodes()
        if self.broker is not None:
            with contextlib.suppress(Exception):
                self.broker.stop()
        if self.postgres is not None:
            log_path = self.postgres.log_path
            with contextlib.suppress(Exception):
                self.postgres.stop()
            with contextlib.suppress(OSError):
                shutil.copyfile(log_path, self.logs_dir / "postgres.log")
