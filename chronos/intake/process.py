"""Intake in its own OS process: the node's side of it, and the wire between the two.

A node is one supervisor process (HTTP server, monitor, firing, recovery) and one intake process
(consumer, crash quarantine, its own database connection and publisher), so that consuming and
encoding a batch never holds the interpreter lock that the firing dispatcher's timers wait for,
and the quarantine's probe forks a small process. ``IntakeProcess`` is the node's loop named
"intake": its thread starts ``python -m chronos.intake.child`` (a clean interpreter, never a
fork of a process with Kafka client threads), follows it and ends when it ends, so the node
supervises it like any loop:

* the child sends a status line every ``STATUS_INTERVAL_S``: how long ago its loop last made
  progress (``/health/live``), its assigned partitions, whether its loop is warm
  (``/health/ready``) and a snapshot of its metrics (merged into the node's ``/metrics``, see
  ``chronos.observability.relay``);
* ``stop()`` sends it a stop line: it stops consuming, commits its offsets and exits 0; a child
  that outlives the shutdown timeout is killed;
* a child that exits unasked, or not with 0, makes ``run()`` raise: the node stops, non-zero;
* the child dies with the node: SIGKILL on the death of the thread that started it
  (``PR_SET_PDEATHSIG``), and when its end of the socket reads end-of-file.

The wire is a Unix socket pair, one JSON object per line.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from chronos.config.settings import Settings, as_environment
from chronos.config.values import ENV_PREFIX
from chronos.errors import ChronosError
from chronos.observability.relay import MergedRegistry
from chronos.runtime.loop import Loop

log = logging.getLogger(__name__)

CHILD_MODULE = "chronos.intake.child"
STATUS_INTERVAL_S = 0.5
_EXIT_WAIT_S = 5.0
# Variables a node may carry that are not settings: test hooks, passed on as they are.
_PASSED_ON = ("CHRONOS_TEST_", "CHRONOS_FAULT_", "CHRONOS_DEV_")


def encode(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def child_environment(
    settings: Settings, environ: Mapping[str, str] = os.environ
) -> dict[str, str]:
    """The environment of the intake process: this one's, with every CHRONOS_* setting replaced by
    the node's resolved settings (its node id included)."""
    env = {
        key: value
        for key, value in environ.items()
        if not key.startswith(ENV_PREFIX) or key.startswith(_PASSED_ON)
    }
    env.update(as_environment(settings))
    return env


def describe_exit(code: int) -> str:
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


class IntakeProcess(Loop):
    """The node's loop "intake", run by a child process (see the module doc)."""

    name = "intake"
    cold_start = True  # warm once the child says its loop is (its first group assignment)

    def __init__(
        self, settings: Settings, registry: MergedRegistry, command: Sequence[str] | None = None
    ):
        super().__init__()
        self.settings = settings
        self.registry = registry
        self.command = tuple(command or (sys.executable, "-m", CHILD_MODULE))
        self.assigned: set[tuple[str, int]] = set()
        self.process: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._stop_asked_at: float | None = None

    # -- the node's side of the Loop interface ---------------------------------------------------

    def stop(self) -> None:
        super().stop()
        with self._lock:
            if self._stop_asked_at is None:
                self._stop_asked_at = time.monotonic()
            self._tell({"op": "stop"})

    def _tell(self, message: Mapping[str, Any]) -> None:
        """Send a line to the child (under the lock); a child already gone is found by run()."""
        if self._sock is None:
            return
        try:
            self._sock.sendall(encode(message))
        except OSError as exc:
            log.debug("intake process unreachable: %s", exc)

    def run(self) -> None:
        ours, theirs = socket.socketpair()
        with ours:
            try:
                self.process = subprocess.Popen(
                    [*self.command, str(theirs.fileno()), str(os.getpid())],
                    env=child_environment(self.settings),
                    pass_fds=(theirs.fileno(),),
                )
            finally:
                theirs.close()
            pid = self.process.pid
            log.info("intake process started (pid %d)", pid, extra={"event": "intake_spawned"})
            with self._lock:
                self._sock = ours
                if self.stopping.is_set():
                    self._tell({"op": "stop"})
            try:
                self._follow(ours)
            finally:
                code = self._reap(self.process)
                with self._lock:
                    self._sock = None
        if not (self.stopping.is_set() and code == 0):
            asked = "" if self.stopping.is_set() else " unasked"
            raise ChronosError(f"the intake process (pid {pid}) {describe_exit(code)}{asked}")

    def _follow(self, sock: socket.socket) -> None:
        """Read status lines until the child closes its end (it exited)."""
        sock.settimeout(STATUS_INTERVAL_S)
        pending = b""
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except TimeoutError:
                self._kill_if_late()
                continue
            except OSError:
                return
            if not chunk:
                return
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                self.receive(json.loads(line))
            self._kill_if_late()

    def receive(self, message: Mapping[str, Any]) -> None:
        """Take in one status line of the child."""
        if message.get("op") != "status":
            return
        self.alive_at = time.monotonic() - float(message["age"])
        self.assigned = {(str(t), int(p)) for t, p in message["assigned"]}
        if message.get("warm"):
            self.warm.set()
        self.registry.receive(message["metrics"])

    def _kill_if_late(self) -> None:
        asked = self._stop_asked_at
        limit = self.settings.shutdown_timeout_ms / 1000
        if (
            asked is not None
            and time.monotonic() - asked > limit
            and self.process is not None
            and self.process.poll() is None
        ):
            log.error(
                "intake process did not stop within the shutdown timeout; killing it",
                extra={"event": "intake_killed"},
            )
            self.process.kill()

    def _reap(self, process: subprocess.Popen[bytes]) -> int:
        try:
            return process.wait(_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            # The socket closed but the process lingers (it closed the socket itself?).
            process.kill()
            return process.wait()
