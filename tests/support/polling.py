"""Waiting in tests for something another thread or process does: poll until it holds."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(condition: Callable[[], object], timeout: float = 15.0, every: float = 0.05) -> bool:
    """Poll ``condition`` every ``every`` seconds until it holds or ``timeout`` seconds pass;
    whether it held at the last look."""
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        if condition():
            return True
        time.sleep(every)
    return bool(condition())
