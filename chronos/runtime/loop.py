"""What every loop shares: a name, a stop event, an interruptible wait and retry backoff."""

from __future__ import annotations

import random
import threading
import time


class Backoff:
    """Exponential backoff with full jitter: 50 ms doubling to a cap, reset on success."""

    def __init__(self, initial: float = 0.05, cap: float = 5.0):
        self.initial = initial
        self.cap = cap
        self.attempt = 0

    def next_delay(self) -> float:
        delay = min(self.cap, self.initial * (2**self.attempt))
        self.attempt += 1
        return random.uniform(delay / 2, delay)


class Loop:
    """A named, stoppable unit of work run on its own thread by the node.

    ``warm`` is set once the loop can do its work on time from its first item (the node is
    ready only when every loop is warm; liveness does not wait for it). A loop with something
    to warm up first (a group to join, connections to open) says so with ``cold_start`` and
    sets ``warm`` itself; the others are warm from the start."""

    name = "loop"
    cold_start = False

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.warm = threading.Event()
        if not self.cold_start:
            self.warm.set()
        # time.monotonic() at the start of the latest iteration (liveness): a loop stuck in
        # one call (a statement on a black-holed connection) stops moving it.
        self.alive_at = time.monotonic()

    def progress_at(self) -> float:
        """The oldest progress mark of this loop's threads (time.monotonic())."""
        return self.alive_at

    def stop(self) -> None:
        self.stopping.set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if the loop was asked to stop meanwhile.

        A loop that waits (between retries of a dependency that is away, say) is not stuck in a
        call: waiting counts as progress, before and after, so liveness follows the process,
        not its dependencies."""
        self.alive_at = time.monotonic()
        stopped = self.stopping.wait(max(0.0, seconds))
        self.alive_at = time.monotonic()
        return stopped

    def run(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError
