"""Process helpers of the embedded services: ports, child processes, parent-death signals."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


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
