"""SIGINT and SIGTERM handed to a thread: a signal handler that takes no lock.

A Python signal handler runs on the main thread between two of its bytecodes, maybe while that
thread holds the very lock the handler's work needs (a ``threading.Event``'s, inside its
``wait``; a log stream's): taking it again deadlocks the process, which then ignores every later
signal too. So the handler only writes the signal's number to a pipe, and a thread of its own
reads it and does the work (logging, setting an event).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def relay_signals(
    act: Callable[[signal.Signals], None], signals: Iterable[signal.Signals] = STOP_SIGNALS
) -> Callable[[], None]:
    """Hand each of ``signals`` to ``act`` on a thread of its own (install from the main thread
    only). Returns a function that puts the previous handlers back and ends the thread."""
    readable, writable = os.pipe()

    def handler(signum: int, _frame: FrameType | None) -> None:
        os.write(writable, bytes([signum]))

    def relay() -> None:
        try:
            while data := os.read(readable, 1):
                act(signal.Signals(data[0]))
        finally:
            os.close(readable)

    threading.Thread(target=relay, name="chronos-signals", daemon=True).start()
    previous = {sig: signal.signal(sig, handler) for sig in signals}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)
        os.close(writable)  # the thread reads end-of-file and ends

    return restore
