"""What every step of a benchmark run shares: the run's context, its interruption, its log
line, and waiting for a child that Ctrl-C may interrupt."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from loadtest.bench.stack import Stack


class Interrupted(Exception):
    """Ctrl-C or SIGTERM."""


@dataclass
class Context:
    out: Path
    stack: Stack
    quick: bool
    profile: set[str]
    profile_seconds: float
    analyze_memory: str = "4g"


def say(message: str) -> None:
    stamp = datetime.now().strftime("%H:%M:%S")
    print(f"bench {stamp} {message}", file=sys.stderr, flush=True)


def wait_child(proc: subprocess.Popen[bytes], what: str) -> int:
    """Wait for a child; on Ctrl-C give it SIGINT (the load generator still writes its
    files), then kill it if it lingers."""
    try:
        return proc.wait()
    except KeyboardInterrupt:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise Interrupted(f"interrupted during {what}") from None
