"""The intake process of a node: ``python -m chronos.intake.child <socket fd> <node pid>``.

Started by the node (``chronos.intake.process``) with the node's resolved settings in its
environment. It runs the intake loop on its main thread and, beside it, one thread that sends the
node a status line every ``STATUS_INTERVAL_S`` and one that reads the node's lines (``stop``).
It never outlives the node: ``PR_SET_PDEATHSIG`` has the kernel SIGKILL it when the node's
thread that started it dies, and end-of-file on the socket (the node is gone) does the same.
SIGTERM and SIGINT are the node's to act on (a terminal's Ctrl-C reaches both processes): this
process ignores them and stops when the node tells it to. A fault point (``chronos.runtime.faults``)
kills the node too: it simulates the crash of the whole node.

Only the standard library is imported before ``main`` runs a test hook (``CHRONOS_TEST_INJECT``,
as the fault suite's node runner does), so that a hook may patch what Chronos imports.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from typing import Any, NoReturn

from chronos.config.validation import validate

log = logging.getLogger("chronos.intake.child")

PR_SET_PDEATHSIG = 1
TEST_INJECT_ENV = "CHRONOS_TEST_INJECT"
FINAL_STATUS_WAIT_S = 5.0


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies (Linux), and at once if it already has."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)


def _inject_test_hook() -> None:
    module, _, function = os.environ.get(TEST_INJECT_ENV, "").partition(":")
    if module:
        getattr(importlib.import_module(module), function)()


class Link:
    """This process's end of the socket: status lines out, the node's lines in.

    A status is sent without ever waiting for the node to read it: a node that reads nothing (it
    is paused, or busy) must never hold up this process. A status the socket buffer cannot take
    whole waits, as the only one, for the next send; while it waits, newer statuses are dropped
    (each supersedes the one before), so no line is ever torn or sent twice. Only the final
    status (``close``) waits for the node, ``FINAL_STATUS_WAIT_S`` at most.
    """

    def __init__(self, sock: socket.socket, loop: Any) -> None:
        self.sock = sock
        self.loop = loop
        self.dropped = 0  # statuses dropped because the node was not reading
        self._unsent = b""
        self._lock = threading.Lock()
        self._done = threading.Event()

    def start(self, interval: float) -> None:
        threading.Thread(target=self._listen, name="chronos-intake-link", daemon=True).start()
        threading.Thread(
            target=self._report, args=(interval,), name="chronos-intake-status", daemon=True
        ).start()

    def status(self) -> bytes:
        from chronos.intake.process import encode
        from chronos.observability import relay as metrics_relay

        return encode(
            {
                "op": "status",
                "age": max(0.0, time.monotonic() - self.loop.progress_at()),
                "assigned": sorted(self.loop.assigned),
                "warm": self.loop.warm.is_set(),
                "metrics": metrics_relay.snapshot(),
            }
        )

    def send_status(self) -> bool:
        """Send a status if the socket takes it now (False: dropped); never blocks."""
        line = self.status()
        with self._lock:
            if not self._flush():
                self.dropped += 1
                return False
            self._unsent = line
            self._flush()
            return True

    def close(self) -> None:
        """Send the last status (final counters) and stop reporting."""
        self._done.set()
        line = self.status()
        deadline = time.monotonic() + FINAL_STATUS_WAIT_S
        with self._lock:
            if self._drain(deadline):
                self._unsent = line
                self._drain(deadline)

    def _flush(self) -> bool:
        """Send what the socket takes of the unsent line now; True once none is left."""
        while self._unsent:
            try:
                sent = self.sock.send(self._unsent, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return False
            except OSError:
                _orphaned()
            self._unsent = self._unsent[sent:]
        return True

    def _drain(self, deadline: float) -> bool:
        """Flush the unsent line, waiting for the node to read until ``deadline``."""
        while not self._flush():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            select.select([], [self.sock], [], left)
        return True

    def _report(self, interval: float) -> None:
        while not self._done.wait(interval):
            self.send_status()

    def _listen(self) -> None:
        import json

        pending = b""
        while True:
            try:
                chunk = self.sock.recv(4096)
            except OSError:
                chunk = b""
            if not chunk:
                _orphaned()
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                if json.loads(line).get("op") == "stop":
                    self.loop.stop()


def _orphaned() -> NoReturn:
    """The node is gone: never consume on alone (its offsets are stored, not all committed:
    whatever was not committed is consumed again by the partition's next owner)."""
    os.kill(os.getpid(), signal.SIGKILL)
    raise SystemExit(1)  # not reached


def main(argv: list[str]) -> int:
    control_fd, parent = int(argv[0]), int(argv[1])
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _inject_test_hook()

    from chronos import kafka
    from chronos.config import settings
    from chronos.intake.loop import IntakeLoop
    from chronos.intake.process import STATUS_INTERVAL_S
    from chronos.observability import dependencies, logs, metrics
    from chronos.observability import relay as metrics_relay
    from chronos.runtime import faults
    from chronos.store.shards import open_stores, shard_layout

    config = validate(settings.load(), require_database=True)
    logs.configure(
        config.log_level,
        config.log_format,
        node=config.node_id,
        secrets=settings.secret_values(config),
    )
    dependencies.quiet()  # the node process reports the dependencies' outages
    # Consuming is throughput work and firing is timing work: under CPU contention the node's
    # timers come first (the header probes, forked from this process, inherit the priority).
    os.nice(config.intake_niceness)
    threading.current_thread().name = "chronos-intake"
    faults.kill_also(parent)
    stores = open_stores(config)  # one per shard, shard 0 first
    store = stores[0]
    metrics.RUNNING_STATEMENT_AGE.set_function(store.longest_running_s)
    metrics_relay.expose_process("intake")
    loop = IntakeLoop(
        config,
        store,
        kafka.make_publisher(config, "intake"),
        lambda **callbacks: kafka.make_consumer(config, **callbacks),
        shards=stores,
        shard_map=shard_layout(config)[1],
    )
    link = Link(socket.socket(fileno=control_fd), loop)
    link.start(STATUS_INTERVAL_S)
    log.info(
        "intake process of node %s started (pid %d)",
        config.node_id,
        os.getpid(),
        extra={"event": "intake_process_started"},
    )
    code = 0
    try:
        loop.run()
    except BaseException:
        log.exception("intake died", extra={"event": "loop_died"})
        code = 1
    finally:
        link.close()
        for each in stores:
            each.close()
    return code if loop.stopping.is_set() else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
