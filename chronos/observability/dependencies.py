"""Whether the node's dependencies — Postgres and the Kafka broker — answer: one state per
dependency per process, one log line per change.

A loop whose dependency is away retries with back-off; if each failed call logged a warning,
an outage of minutes would bury the log under two lines a second per loop. Instead the first
failure of an outage logs one WARNING (``dependency_down``) and sets
``chronos_dependency_up{dependency}`` to 0; while the outage lasts, one reminder every
``REMINDER_S`` (``dependency_still_down``, with its age and the failed attempts); the first
success after it logs one INFO line (``dependency_up``, with how long it lasted) and sets the
gauge to 1. Failures that are not outages (a refused statement, a timeout) log where they
happen, as before. The intake process tracks the same states quietly (``quiet()``): the node
process, which talks to both dependencies too, speaks for the node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from prometheus_client import Gauge

log = logging.getLogger(__name__)

REMINDER_S = 60.0

DEPENDENCY_UP = Gauge(
    "chronos_dependency_up",
    "1 while the dependency (postgres, kafka) answers this node, 0 during an outage",
    ["dependency"],
)


class Dependency:
    """The up/down state of one dependency in this process (thread-safe)."""

    def __init__(self, name: str, label: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name  # for people: "Postgres", "Kafka"
        self.label = label  # the gauge's label: "postgres", "kafka"
        self.clock = clock
        self.announce = True
        self._lock = threading.Lock()
        self._up: bool | None = None  # None: not contacted yet
        self._down_since = 0.0
        self._failures = 0
        self._reminded_at = 0.0

    @property
    def down(self) -> bool:
        return self._up is False

    def succeeded(self) -> None:
        """A call reached the dependency."""
        if self._up:  # the common case, without the lock
            return
        with self._lock:
            was_down = self._up is False
            self._up = True
            if self.announce:
                DEPENDENCY_UP.labels(self.label).set(1)
            if was_down:
                lasted = self.clock() - self._down_since
                self._log(
                    logging.INFO,
                    "%s is back after %.1f s (%d failed attempts meanwhile)",
                    self.name,
                    lasted,
                    self._failures,
                    event="dependency_up",
                    seconds=round(lasted, 1),
                )

    def failed(self, error: object) -> None:
        """A call could not reach the dependency (connection refused, lost, timed out)."""
        with self._lock:
            now = self.clock()
            if self._up is not False:
                self._up, self._down_since, self._failures = False, now, 1
                self._reminded_at = now
                if self.announce:
                    DEPENDENCY_UP.labels(self.label).set(0)
                self._log(
                    logging.WARNING,
                    "%s is unavailable: %s (retrying with back-off until it answers)",
                    self.name,
                    _short(error),
                    event="dependency_down",
                )
                return
            self._failures += 1
            if now - self._reminded_at >= REMINDER_S:
                self._reminded_at = now
                self._log(
                    logging.WARNING,
                    "%s still unavailable after %.0f s (%d failed attempts): %s",
                    self.name,
                    now - self._down_since,
                    self._failures,
                    _short(error),
                    event="dependency_still_down",
                    seconds=round(now - self._down_since, 1),
                )

    def _log(self, level: int, message: str, *args: object, **extra: object) -> None:
        log.log(
            level if self.announce else logging.DEBUG,
            message,
            *args,
            extra={**extra, "dependency": self.label},
        )

    def reset(self) -> None:
        """Forget the state (tests)."""
        with self._lock:
            self._up, self._failures = None, 0


def _short(error: object) -> str:
    """The first line of an error, at most 300 characters (driver errors span lines)."""
    text = str(error).strip().splitlines()
    return (text[0] if text else type(error).__name__)[:300]


POSTGRES = Dependency("Postgres", "postgres")
KAFKA = Dependency("Kafka", "kafka")
# Kafka answering is not Kafka taking writes: with too few in-sync replicas (two of three
# brokers down) every metadata request succeeds and every produce fails. The firing loop's
# deliveries tell this one.
KAFKA_WRITES = Dependency("Writing to Kafka", "kafka_writes")
# Postgres answering is not the node reading what is paused and limited (a role without the
# grants on chronos_pauses or chronos_limits): the firing loop claims nothing meanwhile, so no
# paused or limited work fires unknowingly, and the node is not ready.
FLOW_CONTROL = Dependency("Reading the pause and limit tables", "flow_control")


# With several shards (docs/shards.md), one per shard's database: "postgres-0", "postgres-1"...
_SHARDS: dict[int, Dependency] = {}
_QUIET = False


def postgres(shard: int | None = None) -> Dependency:
    """The Postgres database of ``shard`` (None: the one database of a deployment without
    shards, ``POSTGRES``): each its own state, log lines and gauge label."""
    if shard is None:
        return POSTGRES
    with _LOCK:
        found = _SHARDS.get(shard)
        if found is None:
            found = _SHARDS[shard] = Dependency(f"Postgres (shard {shard})", f"postgres-{shard}")
            found.announce = not _QUIET
        return found


_LOCK = threading.Lock()


def quiet() -> None:
    """Track the states without logging or exporting them (the intake process)."""
    global _QUIET
    _QUIET = True
    for dependency in (POSTGRES, KAFKA, KAFKA_WRITES, FLOW_CONTROL, *_SHARDS.values()):
        dependency.announce = False
