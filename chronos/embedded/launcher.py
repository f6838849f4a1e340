"""Node processes on this machine: start them, wait until they are ready and hold the input
partitions, stop them.

``chronos dev``, the benchmark (``loadtest.bench``) and the fault suite
(``tests/support/cluster.py``) all start their nodes here, next to the embedded Postgres and
broker they run against. What a node is doing is read from its HTTP server, never from its log
text: ``/health/ready`` for readiness, ``/metrics`` (read with ``prometheus_client.parser``) for
everything else, the partitions it holds included (``chronos_assigned_partition``).

Each child starts through a tiny Python stub that asks Linux to signal the child when its parent
dies (so no node outlives a crashed ``chronos dev``, benchmark or test run), checks that the parent
is still the one that started it, then execs the real command. (A ``preexec_fn`` would do the
same, but is unsafe in a process that runs threads.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

NODE_COMMAND: tuple[str, ...] = (sys.executable, "-m", "chronos", "run")
"""How a node is started unless the caller says otherwise."""

ASSIGNED_PARTITION_METRIC = "chronos_assigned_partition"

_STUB = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, int(sys.argv[1]), 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[2]):\n"
    "    os._exit(70)\n"
    "os.execvp(sys.argv[3], sys.argv[3:])\n"
)


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without its ``CHRONOS_*`` variables (the child gets exactly
    the settings it is given), unbuffered Python output, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOS_")}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class Sample:
    """One Prometheus sample."""

    name: str
    labels: dict[str, str]
    value: float


def parse_metrics(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition (``prometheus_client``'s own parser)."""
    return [
        Sample(s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


@dataclass
class Launched:
    """One child process started by :func:`launch`, and where its HTTP server listens (port 0:
    none)."""

    name: str
    process: subprocess.Popen[bytes]
    http_port: int = 0
    host: str = "127.0.0.1"
    log_path: Path | None = None
    # Whether the child leads a process group of its own (``launch(new_session=True)``): then
    # ``send_tree`` reaches the processes it starts too (a node's intake process).
    own_group: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def send(self, sig: signal.Signals) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(sig)

    def send_tree(self, sig: signal.Signals) -> None:
        """``sig`` to the child's whole process group in one call (all of it or none), as a
        container freeze or a VM stall stops all of a node's processes at once; to the child
        alone when it shares this process's group."""
        if not self.own_group:
            self.send(sig)
        elif self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)

    def _get(self, path: str, timeout: float) -> tuple[int, str]:
        if not self.http_port:
            raise urllib.error.URLError(f"{self.name} runs without an HTTP server")
        url = f"http://{self.host}:{self.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, ""

    def ready(self, timeout: float = 1.0) -> bool:
        """Whether ``/health/ready`` answers 200 (loops running, Postgres and broker reachable)."""
        try:
            return self._get("/health/ready", timeout)[0] == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def metrics_text(self, timeout: float = 5.0) -> str:
        """The ``/metrics`` text; raises ``OSError`` when the node does not answer."""
        status, text = self._get("/metrics", timeout)
        if status != 200:
            raise OSError(f"{self.name}: /metrics answered {status}")
        return text

    def metrics(self, timeout: float = 5.0) -> list[Sample]:
        return parse_metrics(self.metrics_text(timeout))

    def assignment(self, timeout: float = 5.0) -> set[tuple[str, int]]:
        """The input partitions the node's consumer holds now, from ``/metrics``."""
        return {
            (s.labels["topic"], int(s.labels["partition"]))
            for s in self.metrics(timeout)
            if s.name == ASSIGNED_PARTITION_METRIC and s.value == 1
        }

    def stop(self, timeout: float, sig: signal.Signals = signal.SIGTERM) -> int | None:
        """``sig`` and wait; SIGKILL after ``timeout`` s (then the exit code is None)."""
        self.send(sig)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)
            return None


def launch(
    name: str,
    command: Sequence[str],
    *,
    env: Mapping[str, str],
    http_port: int = 0,
    log_path: Path | None = None,
    cwd: Path | None = None,
    death_signal: signal.Signals = signal.SIGKILL,
    new_session: bool = True,
) -> Launched:
    """Start ``command`` (its first element an executable path) as a child that gets
    ``death_signal`` when this process dies. Its output (stderr too) is appended to ``log_path``,
    or else readable from ``process.stdout``."""
    argv = [sys.executable, "-c", _STUB, str(int(death_signal)), str(os.getpid()), *command]
    with contextlib.ExitStack() as stack:
        stdout = (
            stack.enter_context(log_path.open("ab")) if log_path is not None else subprocess.PIPE
        )
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=new_session,
        )
    return Launched(name, process, http_port, log_path=log_path, own_group=new_session)


def wait_ready(
    nodes: Sequence[Launched], timeout: float, stop: threading.Event | None = None
) -> str | None:
    """None once every node answers ``/health/ready``; otherwise why not ("interrupted" when
    ``stop`` was set)."""
    pending = list(nodes)
    deadline = time.monotonic() + timeout
    while pending:
        for node in list(pending):
            code = node.returncode
            if code is not None:
                return f"{node.name} exited with code {code} before it was ready"
            if node.ready():
                pending.remove(node)
        if not pending:
            return None
        if stop is not None and stop.wait(0.2):
            return "interrupted"
        if stop is None:
            time.sleep(0.2)
        if time.monotonic() > deadline:
            ports = ", ".join(str(n.http_port) for n in pending)
            return f"nodes not ready after {timeout:.0f} s (HTTP ports {ports})"
    return None


def _assignment_or_empty(node: Launched) -> set[tuple[str, int]]:
    try:
        return node.assignment()
    except (urllib.error.URLError, OSError, ValueError):
        return set()


def wait_assigned(
    nodes: Sequence[Launched],
    topic: str,
    partitions: int,
    timeout: float,
    stable: float = 0.5,
    every: float = 0.1,
) -> str | None:
    """None once ``nodes`` share every partition of ``topic``, no partition twice, each node
    holding some (when there are enough partitions), unchanged for ``stable`` s; otherwise why
    not."""
    wanted = {(topic, p) for p in range(partitions)}
    deadline = time.monotonic() + timeout
    settled_since: float | None = None
    last: list[set[tuple[str, int]]] | None = None
    while True:
        dead = [n for n in nodes if not n.alive()]
        if dead:
            return f"{dead[0].name} exited with code {dead[0].returncode}"
        held = [{tp for tp in _assignment_or_empty(n) if tp[0] == topic} for n in nodes]
        union: set[tuple[str, int]] = set().union(*held)
        good = (
            union == wanted
            and sum(len(h) for h in held) == len(union)
            and (all(held) or len(nodes) > len(wanted))
        )
        now = time.monotonic()
        if good and held == last:
            settled_since = settled_since or now
            if now - settled_since >= stable:
                return None
        else:
            settled_since = None
        last = held
        if now > deadline:
            detail = {n.name: sorted(p for _, p in h) for n, h in zip(nodes, held, strict=True)}
            return f"the consumer group did not settle in {timeout:.0f} s: {detail}"
        time.sleep(every)


def stop_all(
    nodes: Iterable[Launched],
    timeout: float,
    *,
    on_kill: Callable[[Launched], None] | None = None,
) -> dict[str, int | None]:
    """SIGCONT (each node's whole process tree) and SIGTERM every node at once, wait up to
    ``timeout`` s in all, SIGKILL what is left (calling ``on_kill`` first). Returns each node's
    exit code (None: killed)."""
    nodes = list(nodes)
    for node in nodes:
        node.send_tree(signal.SIGCONT)
        node.send(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    codes: dict[str, int | None] = {}
    for node in nodes:
        try:
            codes[node.name] = node.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            if on_kill is not None:
                on_kill(node)
            node.process.kill()
            node.process.wait(30)
            codes[node.name] = None
    return codes
