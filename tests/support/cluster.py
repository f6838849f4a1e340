"""Real Chronos nodes as separate OS processes, and the table they share, for the fault suite.

``Cluster`` starts ``python -m chronos run`` processes configured through their ``CHRONOS_*``
environment (``chronos.config.settings.as_environment``), each logging JSON lines to its own file,
and
lets a test signal them (SIGKILL, SIGSTOP/SIGCONT, SIGTERM), restart them, read their events
and metrics, and watch their CPU time and memory. A node is a process tree (``chronos run`` and
its intake process): a pause stops all of it, CPU time and memory are summed over all of it.
``close()`` resumes any stopped process and stops every process it started, by its own handle,
never by name.

``Table`` is a thin read (and, for fault injection, write) view of ``chronos_messages`` with a
new connection per call, so it survives a Postgres restart.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import psutil
import psycopg

from chronos.config.settings import OPTIONS_BY_NAME, Settings, as_environment
from chronos.embedded import free_port
from chronos.embedded.launcher import NODE_COMMAND, Launched, child_environment, launch, stop_all
from chronos.embedded.launcher import wait_assigned as launcher_wait_assigned
from chronos.embedded.launcher import wait_ready as launcher_wait_ready
from tests.support.checker import Expectation, Report, check
from tests.support.kafka import Topics
from tests.support.settings import make_settings

REPO = Path(__file__).resolve().parents[2]

# With CHRONOS_TEST_INJECT=module:function a node runs through this script instead of
# ``python -m chronos run``: it calls that function first, in the node process, to install a
# test-only fault (see tests/fault/injections.py), then runs the node.
_INJECTING_RUNNER = """
import importlib, os
module, _, function = os.environ["CHRONOS_TEST_INJECT"].partition(":")
getattr(importlib.import_module(module), function)()
from chronos.cli import main
raise SystemExit(main(["run"]))
"""

# The timings a fault scenario's bounds derive from (tests/fault/bounds.py).
TIMINGS = (
    "hold_time_ms",
    "lookahead_ms",
    "delivery_timeout_ms",
    "poll_interval_ms",
    "failure_detection_interval_ms",
    "liveness_window_ms",
    "timing_advance_ms",
    "shutdown_timeout_ms",
)

SHIPPED_TIMINGS: dict[str, Any] = {name: OPTIONS_BY_NAME[name].default for name in TIMINGS}
"""What a user runs (the declarations' defaults of the timings): what every ``Cluster`` applies
unless a scenario overrides one, which it then names in its docstring with the reason (what it
proves that the shipped defaults cannot)."""


@dataclass
class NodeProcess:
    """One ``chronos run`` process."""

    name: str
    settings: Settings
    launched: Launched
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)
    paused: bool = False
    _offset: int = 0
    _events: list[dict[str, Any]] = field(default_factory=list)
    _lines: list[str] = field(default_factory=list)
    _partial: bytes = b""

    @property
    def node_id(self) -> str:
        return self.settings.node_id

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self.launched.process

    @property
    def pid(self) -> int:
        return self.process.pid

    # -- state ---------------------------------------------------------------------------------

    def alive(self) -> bool:
        return self.launched.alive()

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def _read_log(self) -> None:
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return
        if not chunk:
            return
        self._offset += len(chunk)
        data = self._partial + chunk
        *complete, self._partial = data.split(b"\n")
        for raw in complete:
            line = raw.decode("utf-8", errors="replace")
            self._lines.append(line)
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    self._events.append(json.loads(line))

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        self._read_log()
        return [e for e in self._events if name is None or e.get("event") == name]

    def lines(self) -> list[str]:
        self._read_log()
        return list(self._lines)

    def tail(self, count: int = 40) -> str:
        return "\n".join(self.lines()[-count:])

    def wait_event(
        self,
        name: str,
        timeout: float,
        predicate: Callable[[dict[str, Any]], bool] | None = None,
        after: int = 0,
    ) -> dict[str, Any] | None:
        """The first event ``name`` (index >= ``after``) matching ``predicate``, or None."""
        limit = time.monotonic() + timeout
        while True:
            for event in self.events(name)[after:]:
                if predicate is None or predicate(event):
                    return event
            if time.monotonic() >= limit or not self.alive():
                return None
            time.sleep(0.05)

    def assignment(self) -> set[tuple[str, int]]:
        """Input partitions this node holds now, from its ``/metrics``."""
        return self.launched.assignment()

    def metrics(self) -> dict[str, float]:
        """Prometheus samples (``name`` or ``name{k="v",...}`` -> value) from ``/metrics``."""
        if not self.settings.http_port:
            raise RuntimeError(f"node {self.name} runs without an HTTP port")
        samples: dict[str, float] = {}
        for sample in self.launched.metrics():
            labels = ",".join(f'{k}="{v}"' for k, v in sample.labels.items())
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return samples

    def metric(self, name: str, default: float = 0.0) -> float:
        return self.metrics().get(name, default)

    def processes(self) -> list[psutil.Process]:
        """The node's live processes: ``chronos run`` and its descendants (the intake process,
        its header probes)."""
        root = psutil.Process(self.pid)
        return [root, *root.children(recursive=True)]

    def cpu_seconds(self) -> float:
        """User + system CPU time of the node so far: every live process of its tree, and the
        children each has reaped (a node is more than one process)."""
        total = 0.0
        for process in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                t = process.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        return total

    def rss_bytes(self) -> int:
        """Resident memory of the node: the sum over its live processes."""
        total = 0
        for process in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                total += int(process.memory_info().rss)
        return total

    # -- signals -------------------------------------------------------------------------------

    def send(self, sig: signal.Signals) -> None:
        self.launched.send(sig)

    def kill(self) -> int:
        """SIGKILL; returns once the process is gone."""
        self.resume()
        self.send(signal.SIGKILL)
        return self.process.wait(30)

    def pause(self) -> None:
        """SIGSTOP the node's whole process tree at once, as a container freeze or a VM stall
        would (pausing ``chronos run`` alone would leave its intake process consuming)."""
        self.launched.send_tree(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            self.launched.send_tree(signal.SIGCONT)
            self.paused = False

    def terminate(self, timeout: float | None = None) -> int:
        """SIGTERM (graceful drain) and wait; SIGKILL if it outlives ``timeout``."""
        self.resume()
        self.send(signal.SIGTERM)
        wait = timeout if timeout is not None else self.settings.shutdown_timeout_ms / 1000 + 10
        code = self.launched.stop(wait)
        if code is None:
            raise subprocess.TimeoutExpired(self.launched.process.args, wait)
        return code

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def debugging() -> dict[str, Any]:
    """``CHRONOS_TEST_KAFKA_DEBUG=cgrp,eos,...``: every node of every scenario logs at DEBUG with
    these librdkafka debug contexts on its consumer and producers (``cgrp``: the group's joins,
    heartbeats and commits; ``eos``: the idempotent producer's id and sequences), to find why a
    scenario's consumers lost their group or its records were appended twice. Unset: nothing
    changes."""
    contexts = os.environ.get("CHRONOS_TEST_KAFKA_DEBUG", "")
    if not contexts:
        return {}
    return {
        "log_level": "DEBUG",
        "consumer_properties": {"debug": contexts},
        "producer_properties": {"debug": contexts},
    }


class Cluster:
    """Chronos node processes sharing one database and one set of topics."""

    def __init__(
        self,
        database_url: str,
        bootstrap: str,
        topics: Topics,
        workdir: Path,
        *,
        http: bool = True,
        **overrides: Any,
    ) -> None:
        self.database_url = database_url
        self.bootstrap = bootstrap
        self.topics = topics
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.http = http
        self.overrides = {**SHIPPED_TIMINGS, "log_format": "json", **overrides, **debugging()}
        self.nodes: list[NodeProcess] = []
        self.table = Table(database_url.split()[0])  # shard 0's, with several shards
        self._count = 0

    def settings(self, **overrides: Any) -> Settings:
        values = {**self.overrides, **overrides}
        values.setdefault("node_id", str(uuid.uuid4()))
        if self.http and "http_port" not in values:
            values["http_port"] = free_port()
        values.setdefault("http_host", "127.0.0.1")
        return make_settings(self.database_url, self.bootstrap, self.topics, **values)

    def start(
        self, name: str | None = None, *, env: dict[str, str] | None = None, **overrides: Any
    ) -> NodeProcess:
        """Start one node process (settings: the cluster's, then ``overrides``)."""
        self._count += 1
        name = name or f"node{self._count}"
        settings = self.settings(**overrides)
        full_env = child_environment({**as_environment(settings), **(env or {})})
        full_env.pop("LD_PRELOAD", None)
        command = NODE_COMMAND
        if full_env.get("CHRONOS_TEST_INJECT"):
            command = (sys.executable, "-c", _INJECTING_RUNNER)
        log_path = self.workdir / f"{name}-{self._count}.log"
        launched = launch(
            name, command, env=full_env, http_port=settings.http_port, log_path=log_path, cwd=REPO
        )
        node = NodeProcess(name, settings, launched, log_path)
        self.nodes.append(node)
        return node

    def start_many(self, count: int, **overrides: Any) -> list[NodeProcess]:
        return [self.start(**overrides) for _ in range(count)]

    def live(self) -> list[NodeProcess]:
        return [n for n in self.nodes if n.alive()]

    def wait_started(self, nodes: Sequence[NodeProcess], timeout: float = 60.0) -> None:
        """Wait until every node answers ``/health/ready``."""
        problem = launcher_wait_ready([n.launched for n in nodes], timeout)
        if problem is not None:
            name = problem.split(" ", 1)[0]
            tails = "\n".join(n.tail() for n in nodes if n.name == name)
            raise AssertionError(f"{problem}:\n{tails}")

    def wait_assigned(
        self,
        nodes: Sequence[NodeProcess] | None = None,
        timeout: float = 60.0,
        stable: float = 0.5,
    ) -> None:
        """Wait until ``nodes`` (default: the live ones) share every input partition, each
        holding some (when there are enough partitions), unchanged for ``stable`` seconds."""
        nodes = list(nodes) if nodes is not None else self.live()
        problem = launcher_wait_assigned(
            [n.launched for n in nodes], self.topics.input, self.topics.partitions, timeout, stable
        )
        if problem is not None:
            dead = [n for n in nodes if not n.alive()]
            raise AssertionError(f"{problem}" + (f":\n{dead[0].tail()}" if dead else ""))

    def wait_ready(self, nodes: Sequence[NodeProcess] | None = None, timeout: float = 60.0) -> None:
        nodes = list(nodes) if nodes is not None else self.live()
        self.wait_started(nodes, timeout)
        self.wait_assigned(nodes, timeout)

    def close(self) -> None:
        """Resume stopped nodes, SIGTERM the rest (in parallel), SIGKILL what outlives it."""
        for node in self.nodes:
            node.paused = False
        stop_all([n.launched for n in self.nodes], 15)

    def logs(self, lines: int = 30) -> str:
        """The last ``lines`` lines of every node's log (each cut at 300 characters)."""
        return "\n\n".join(
            f"--- {n.name} ({n.node_id}) ---\n"
            + "\n".join(line[:300] for line in n.lines()[-lines:])
            for n in self.nodes
        )

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for n in self.nodes for e in n.events(name)]

    def digest(self, since: float, limit: int = 20) -> list[str]:
        """What the nodes said since ``since`` (epoch seconds), for a failed scenario's message:
        every warning and error and every change of assignment or producer, grouped by node
        and kind, each with its count and its first and last second after ``since``."""
        groups: dict[tuple[str, str], list[float]] = {}
        for node in self.nodes:
            for event in node.events():
                notable = event.get("level") in ("WARNING", "ERROR", "CRITICAL") or str(
                    event.get("event", "")
                ).startswith(("partitions_", "producer_", "claim_", "lease_", "commit_"))
                at = _epoch(str(event.get("ts", "")))
                if not notable or at is None or at < since:
                    continue
                kind = str(event.get("event") or f"{event.get('logger')}: {event.get('message')}")
                groups.setdefault((node.name, kind[:110]), []).append(at - since)
        ordered = sorted(groups.items(), key=lambda item: item[1][0])
        return [
            f"{name} +{times[0]:.1f}..{times[-1]:.1f}s x{len(times)} {kind}"
            for (name, kind), times in ordered[:limit]
        ]

    def check(
        self, sent: Mapping[str, Expectation], *, timeout: float = 60.0, quiet: float = 1.5
    ) -> Report:
        """The checker's ``check`` of this cluster's output and dead-letter topics, at the
        cluster's timing advance: read until every ``sent`` message was seen (then ``quiet``
        seconds more) or until ``timeout``, then analyse."""
        return check(
            self.bootstrap,
            self.topics.output,
            self.topics.dead_letter,
            sent,
            advance_ms=self.overrides["timing_advance_ms"],
            timeout=timeout,
            quiet=quiet,
        )


# ----------------------------------------------------------------------------- the table


class Table:
    """``chronos_messages`` seen from the test (a new connection per call)."""

    def __init__(self, url: str):
        self.url = url

    @contextlib.contextmanager
    def connect(self) -> Iterator[psycopg.Connection[Any]]:
        with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
            yield conn

    def scalar(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> Any:
        with self.connect() as conn:
            row = conn.execute(cast(Any, sql), params).fetchone()
        return None if row is None else row[0]

    def rows(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> list[Any]:
        with self.connect() as conn:
            return conn.execute(cast(Any, sql), params).fetchall()

    def count(self) -> int:
        return int(self.scalar("SELECT count(*) FROM chronos_messages"))

    def claimed(self, node_id: str | None = None) -> int:
        if node_id is None:
            return int(
                self.scalar("SELECT count(*) FROM chronos_messages WHERE readied_at IS NOT NULL")
            )
        return int(
            self.scalar(
                "SELECT count(*) FROM chronos_messages WHERE readied_by = %s::uuid", (node_id,)
            )
        )

    def claims_of(self, node_id: str) -> dict[str, Any]:
        """id -> readied_at of the rows ``node_id`` holds."""
        return dict(
            self.rows(
                "SELECT id, readied_at FROM chronos_messages WHERE readied_by = %s::uuid",
                (node_id,),
            )
        )

    def ids(self) -> set[str]:
        return {r[0] for r in self.rows("SELECT id FROM chronos_messages")}

    def now(self) -> Any:
        return self.scalar("SELECT now()")

    def wait(self, condition: Callable[[Table], bool], timeout: float, every: float = 0.1) -> bool:
        limit = time.monotonic() + timeout
        while time.monotonic() < limit:
            with contextlib.suppress(psycopg.Error):
                if condition(self):
                    return True
            time.sleep(every)
        return condition(self)


def database_errors(events: Iterable[dict[str, Any]]) -> int:
    return sum(1 for e in events if e.get("event") == "database_error")


def _epoch(ts: str) -> float | None:
    """A log line's ``ts`` (ISO 8601) as epoch seconds."""
    try:
        return datetime.fromisoformat(ts).timestamp()
    except ValueError:
        return None
