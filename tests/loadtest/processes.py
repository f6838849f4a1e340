"""A process tree for the tests of the benchmark's process statistics."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil


@contextlib.contextmanager
def process_tree(script: str, children: int, timeout: float = 30.0) -> Iterator[int]:
    """The pid of a Python process running ``script``, once it has ``children`` children; it and
    its descendants are killed at the end."""
    root = subprocess.Popen([sys.executable, "-c", script])
    try:
        limit = time.monotonic() + timeout
        while len(psutil.Process(root.pid).children()) < children:
            assert time.monotonic() < limit, "the process tree did not start"
            time.sleep(0.05)
        yield root.pid
    finally:
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(root.pid).children(recursive=True):
                child.kill()
        root.kill()
        root.wait()
