"""Signals reach a thread of their own: the handler takes no lock (chronos.runtime.signals)."""

from __future__ import annotations

import os
import signal
import threading

from chronos.runtime.signals import relay_signals


def test_a_signal_is_handed_to_the_relay_thread_and_the_old_handler_comes_back() -> None:
    seen: list[tuple[signal.Signals, str]] = []
    done = threading.Event()

    def act(sig: signal.Signals) -> None:
        seen.append((sig, threading.current_thread().name))
        done.set()

    before = signal.getsignal(signal.SIGUSR1)
    restore = relay_signals(act, [signal.SIGUSR1])
    try:
        # The main thread waits on the very event the relay sets: with a handler that set it
        # itself, a signal landing inside this wait could deadlock on the event's lock.
        os.kill(os.getpid(), signal.SIGUSR1)
        assert done.wait(5)
    finally:
        restore()
    assert seen == [(signal.SIGUSR1, "chronos-signals")]
    assert signal.getsignal(signal.SIGUSR1) == before
