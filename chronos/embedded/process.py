"""Process helpers of the embedded services: ports, child processes, parent-death signals."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chronos.errors import ChronosError

log = logging.getLogger(__name__)


_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()  # ports this process was given: never the same one twice


def _ephemeral_range() -> tuple[int, int]:
    """The ports the kernel picks from for a connection's local end."""
    try:
        low, high = (int(part) for part in _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a listener could bind ``host:port`` now (as servers do, with SO_REUSEADDR, so
    a connection of the port's last owner waiting out TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(count: int, host: str = "127.0.0.1") -> int:
    """The first of ``count`` consecutive TCP ports that are free now, outside the kernel's
    ephemeral range: no outgoing connection can take one as its local port, so a server
    stopped and started again on it (a broker after a kill) finds it free. Another process
    may still bind one before you do."""
    low, high = _ephemeral_range()
    first, last = (10000, low - 1) if low - 10000 >= 4096 else (high + 1, 65535)
    rng = random.SystemRandom()
    for _ in range(500):
        base = rng.randint(first, last - count + 1)
        block = range(base, base + count)
        if _handed_out.isdisjoint(block) and all(port_free(p, host) for p in block):
            _handed_out.update(block)
            return base
    raise ChronosError(f"no {count} consecutive free ports between {first} and {last}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now, outside the ephemeral range (:func:`free_ports`)."""
    return free_ports(1, host)


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
