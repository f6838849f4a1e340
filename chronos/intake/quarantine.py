"""Quarantine for records that would crash the Kafka client: find them before intake reads them.

confluent-kafka builds a header's *name* with a strict UTF-8 decode and does not check the
result: a record whose header name is not valid UTF-8 (kafka-python, Java and Go clients can
write one) makes the first ``Message.headers()`` fail (``SystemError``, or the
``UnicodeDecodeError`` itself) or return a list with a hole, and leaves that broken list cached in
the message: touching the hole crashes the whole process with SIGSEGV. Python cannot catch a
segfault, and a node that dies before storing the batch's offsets replays the record after every
restart, on every node that inherits the partition: one record would stop the cluster.

So intake never reads headers a probe has not read first, and never touches the headers of a
record whose read failed: ``HeaderProbe.poison`` names those records, and intake dead-letters
them with their raw key and value and a reason (their headers cannot be read by this client).
Every node probes every batch, so the node that inherits a partition recognises a poison record
as the first did. Two ways (``CHRONOS_HEADER_PROBE``):

* ``inline`` (the default): the probe reads each record's headers once, in the intake process:
  the first read of such a record either fails with a Python exception or returns a list with a
  hole (a NULL) where a pair or its name should be, which the probe counts without touching it
  (``_read_headers``); the crash needs a touch of the broken list, which intake never makes. No
  fork, no wait: the cost is the read intake makes anyway.
* ``process``: the probe forks a child that reads every record's headers (the child shares the
  parent's memory copy-on-write, so it sees the very same ``Message`` objects) and exits 0. If
  the child dies (a signal) or raises, the index of the record it was reading — written to a
  page of shared memory before each read — names the poison record; the probe goes on from the
  record after it, so any number of poison records in a batch is found with one extra child
  each. This survives a crash of the client that no one has seen yet, even on the first touch,
  at the cost of one fork and wait per consumed batch (see docs/benchmark-results.md); the
  parent's CPU for it grows with its resident memory (page tables).
"""

from __future__ import annotations

import faulthandler
import gc
import logging
import mmap
import os
import resource
import select
import signal
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import Counter

from chronos.observability.logs import Throttle
from chronos.runtime.loop import Backoff

log = logging.getLogger(__name__)

_INDEX = struct.Struct("q")
PROBE_TIMEOUT_S = 10.0  # a child that reads a batch's headers for this long is hung
HUNG_RETRIES = 1  # a hung probe is tried again before its record is quarantined
REAP_TIMEOUT_S = 5.0  # a killed child not reaped by then is left behind (logged), never waited on
RETRY_CAP_S = 30.0  # longest wait between two attempts of a probe the machine stopped
# The crashes the probe exists for: what a header the client cannot read does to a process.
CRASH_SIGNALS = frozenset(
    {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL, signal.SIGFPE}
)
_FAILED_READ = 3  # the child's exit status: reading a record's headers raised
_OUT_OF_MEMORY = 4  # the child's exit status: MemoryError (the machine, not the record)

PROBE_FAILURES = Counter(
    "chronos_header_probe_failures_total",
    "Header probes that could not run or were stopped by the machine (fork failed, the child "
    "killed by the OOM killer or out of memory): retried with back-off, no record blamed",
    ["cause"],
)


class HasHeaders(Protocol):
    def headers(self) -> object: ...


@dataclass(frozen=True, slots=True)
class Poison:
    """A record whose headers the Kafka client cannot read without failing or crashing."""

    index: int  # position in the probed batch
    reason: str  # why: the dead-letter reason


@dataclass(frozen=True, slots=True)
class _Failure:
    """How one probe child ended, when it did not read the whole batch."""

    index: int  # the record it was reading
    reason: str
    kind: str  # "poison" (a crash or a failed read), "hung", or "machine" (not the record's doing)


class HeaderProbe:
    """Finds the records of a batch whose ``headers()`` would fail or crash this process.

    Inline, a record is blamed when its one read raises or shows a hole (it is never read
    again). In a child, a record is blamed only when reading it fails twice in a row at the same
    record (a crash signal, or the read raising): reproducibly. A child stopped by the machine —
    killed by anything but those crashes (the OOM killer's SIGKILL), out of memory, or never
    started because ``fork()`` failed — blames nothing: the probe is tried again with back-off
    (counted in ``chronos_header_probe_failures_total``, logged once a minute), and intake,
    waiting for it, consumes nothing more meanwhile. Every wait for a child is bounded.
    """

    def __init__(
        self,
        timeout: float = PROBE_TIMEOUT_S,
        wait: Callable[[float], bool] | None = None,
        *,
        inline: bool = False,
    ) -> None:
        """``wait(seconds)``: the loop's interruptible sleep between retries (True: stopping);
        ``inline``: read in this process, catching the failed first read (no child)."""
        self.inline = inline
        self.timeout = timeout
        self.wait = wait or _sleep
        self._progress = mmap.mmap(-1, _INDEX.size)  # MAP_SHARED: the child's writes are seen
        self.probes = 0  # children started (for tests and metrics)
        self._warned = Throttle()

    def poison(self, records: Sequence[HasHeaders]) -> list[Poison] | None:
        """The poison records of ``records``, by index; every other record is safe to read.
        None if the loop was stopped while the probe waited to be retried."""
        if self.inline:
            return _read_inline(records)
        found: list[Poison] = []
        start = 0
        hung = 0
        suspect: _Failure | None = None
        while start < len(records):
            failure = self._probe_until_it_runs(records, start)
            if failure is None:
                break
            if failure.kind == "stopped":
                return None
            if failure.kind == "hung":
                if hung < HUNG_RETRIES:
                    hung += 1  # the machine may just be slow: try the same record again
                    continue
            elif failure != suspect:
                suspect = failure  # once is not proof: read from that record again
                start = failure.index
                continue
            hung, suspect = 0, None
            found.append(Poison(failure.index, failure.reason))
            start = failure.index + 1
        return found

    def _probe_until_it_runs(self, records: Sequence[HasHeaders], start: int) -> _Failure | None:
        """Probe records[start:], again and again with back-off while the machine stops the
        probe (kind "stopped" if the loop stops meanwhile)."""
        backoff = Backoff(initial=0.1, cap=RETRY_CAP_S)
        while True:
            try:
                failure = self._probe(records, start)
            except OSError as exc:  # fork() failed: EAGAIN, ENOMEM
                failure = _Failure(start, f"cannot fork the header probe: {exc}", "machine")
            if failure is None or failure.kind != "machine":
                return failure
            cause = "fork" if failure.reason.startswith("cannot fork") else "killed"
            PROBE_FAILURES.labels(cause).inc()
            delay = backoff.next_delay()
            log.log(
                self._warned.level(),
                "%s; no record is blamed: probing again in %.1f s (intake waits)",
                failure.reason,
                delay,
                extra={"event": "header_probe_failed", "cause": cause},
            )
            if self.wait(delay):
                return _Failure(start, "stopping", "stopped")

    def _probe(self, records: Sequence[HasHeaders], start: int) -> _Failure | None:
        """Read the headers of records[start:] in a child. None if all were read."""
        _INDEX.pack_into(self._progress, 0, start)
        self.probes += 1
        pid = os.fork()
        if pid == 0:  # the sacrificial child: read, report progress, never return
            code = 0
            try:
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file per poison
                faulthandler.disable()  # an expected crash: no "Fatal Python error" dump
                for index in range(start, len(records)):
                    _INDEX.pack_into(self._progress, 0, index)
                    _read_headers(records[index])
            except MemoryError:
                code = _OUT_OF_MEMORY
            except BaseException:  # noqa: BLE001 - whatever it is, the child must reach os._exit
                code = _FAILED_READ
            os._exit(code)
        status, hung = self._wait(pid)
        if status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            return None
        index = min(max(_INDEX.unpack_from(self._progress, 0)[0], start), len(records) - 1)
        if hung:
            reason = f"reading the record's headers did not finish within {self.timeout:.0f} s"
            return _Failure(index, reason, "hung")
        if status is None:
            return _Failure(index, "the header probe could not be reaped", "machine")
        if os.WIFSIGNALED(status):
            sig = signal.Signals(os.WTERMSIG(status))
            if sig not in CRASH_SIGNALS:
                return _Failure(index, f"the header probe was killed ({sig.name})", "machine")
            return _Failure(
                index,
                f"reading the record's headers crashed the Kafka client ({sig.name})",
                "poison",
            )
        if os.WEXITSTATUS(status) == _OUT_OF_MEMORY:
            return _Failure(index, "the header probe ran out of memory", "machine")
        reason = (
            "the Kafka client cannot read the record's headers "
            "(a header name that is not valid UTF-8?)"
        )
        return _Failure(index, reason, "poison")

    def _wait(self, pid: int) -> tuple[int | None, bool]:
        """The child's status and whether it hung: waits at most ``timeout`` (then kills it)
        plus ``REAP_TIMEOUT_S`` (a status of None: it could not be reaped)."""
        deadline = time.monotonic() + self.timeout
        while True:
            status = _reap(pid)
            if status is not None:
                return status, False
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                return _reap(pid, REAP_TIMEOUT_S), True
            _sleep_on_child(pid, min(0.05, deadline - time.monotonic()))


def _read_inline(records: Sequence[HasHeaders]) -> list[Poison]:
    """Read every record's headers here; a record whose read fails is poison and is never read
    again (its message caches a broken list). A ``MemoryError`` is the machine's, not the
    record's: it is raised, no record blamed."""
    found: list[Poison] = []
    for index, record in enumerate(records):
        try:
            _read_headers(record)
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the client raises, the record is poison
            reason = (
                f"the Kafka client cannot read the record's headers ({type(exc).__name__}: "
                "a header name that is not valid UTF-8?)"
            )
            found.append(Poison(index, reason))
    return found


def _read_headers(record: HasHeaders) -> None:
    """Read a record's headers and check every pair, as intake will read them. A name the client
    failed to decode can leave a hole (a NULL) in the list or in its pair *without* the read
    failing: touching the hole crashes. The garbage collector's view of a list or tuple skips
    holes, so counting it finds them without touching one."""
    headers = record.headers()
    if headers is None:
        return
    if type(headers) is not list:
        raise TypeError("headers are not a list")
    if len(gc.get_referents(headers)) != len(headers):
        raise ValueError("a header is missing from the client's list")
    for pair in headers:
        if type(pair) is not tuple or len(pair) != 2:
            raise TypeError("a header is not a (name, value) pair")
    if len(gc.get_referents(*headers)) != 2 * len(headers):
        raise ValueError("a header name the client could not decode")
    for name, value in headers:
        if type(name) is not str or not (value is None or type(value) is bytes):
            raise TypeError("a header is not a (str, bytes | None) pair")


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


def _reap(pid: int, within: float = 0.0) -> int | None:
    """The exit status of child ``pid`` if it ended (waiting up to ``within`` s), else None."""
    limit = time.monotonic() + within
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped already (cannot happen: it is ours alone)
            return 0
        if done:
            return status
        if time.monotonic() >= limit:
            if within:
                log.error("header probe child %d could not be reaped", pid)
            return None
        time.sleep(0.005)


def _sleep_on_child(pid: int, seconds: float) -> None:
    """Sleep until child ``pid`` ends or ``seconds`` pass (a pidfd when the kernel has them)."""
    if seconds <= 0:
        return
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        time.sleep(min(seconds, 0.005))
        return
    try:
        select.select([pidfd], [], [], seconds)
    finally:
        os.close(pidfd)
