"""A one-line progress display on stderr (carriage return when it is a terminal)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True, slots=True)
class Snapshot:
    elapsed_s: float
    phase: str
    sent: int
    total: int
    received: int
    in_flight: int
    lateness_p99_ms: float | None
    behind: int
    dead_letter: int


def percentile_of(values: list[int], q: float) -> float | None:
    """Nearest-rank percentile of a small sample (display only)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return float(ordered[rank])


def render(s: Snapshot) -> str:
    p99 = "-" if s.lateness_p99_ms is None else f"{s.lateness_p99_ms:.0f} ms"
    text = (
        f"[{s.elapsed_s:7.1f}s {s.phase:>8}] sent {s.sent}/{s.total} | received {s.received} | "
        f"in flight {s.in_flight} | lateness p99 {p99}"
    )
    if s.dead_letter:
        text += f" | dead-letter {s.dead_letter}"
    if s.behind:
        text += f" | behind {s.behind}"
    return text


class ProgressLine(threading.Thread):
    def __init__(
        self,
        snapshot: Callable[[], Snapshot],
        *,
        stream: TextIO | None = None,
        interval_s: float = 0.5,
        enabled: bool = True,
    ) -> None:
        super().__init__(name="progress", daemon=True)
        self._snapshot = snapshot
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        # Non-terminals (CI logs) get a full line every 10 s instead of a rewritten one.
        self._interval = interval_s if self._tty else 10.0
        self._enabled = enabled
        self._halt = threading.Event()
        self._width = 0

    def _write(self, final: bool = False) -> None:
        line = render(self._snapshot())
        if self._tty:
            pad = max(0, self._width - len(line))
            self._width = len(line)
            self._stream.write("\r" + line + " " * pad + ("\n" if final else ""))
        else:
            self._stream.write(line + "\n")
        self._stream.flush()

    def run(self) -> None:
        if not self._enabled:
            return
        while not self._halt.wait(self._interval):
            self._write()

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join()
        if self._enabled:
            self._write(final=True)
