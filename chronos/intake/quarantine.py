"""Quarantine for records that would crash the Kafka client: read their headers in a sacrificial
process first.

confluent-kafka builds a header's *name* with a strict UTF-8 decode and does not check the
result: a record whose header name is not valid UTF-8 (kafka-python, Java and Go clients can
write one) makes ``Message.headers()`` fail with a ``SystemError`` that leaves a broken list
cached in the message, and the next touch of it crashes the whole process with SIGSEGV. Python
cannot catch a segfault, and a node that dies before storing the batch's offsets replays the
record after every restart, on every node that inherits the partition: one record would stop the
cluster.

So intake never reads headers it has not seen read safely. Before a consumed batch is parsed,
``HeaderProbe.poison`` forks a child that reads every record's headers (the child shares the
parent's memory copy-on-write, so it sees the very same ``Message`` objects) and exits 0. If the
child dies (a signal) or raises, the index of the record it was reading — written to a page of
shared memory before each read — names the poison record; the probe goes on from the record after
it, so any number of poison records in a batch is found with one extra child each. The parent then
reads only the headers of records proven safe, and intake dead-letters the poison ones with their
raw key and value and a reason (their headers cannot be read by this client). Every node probes
every batch, so the node that inherits a partition recognises a poison record as the first did,
without ever crashing.

Cost: one fork and wait per consumed batch, not per record (see docs/lab-notes.md
for the figure); the parent's CPU for it grows with its resident memory (page tables), so it is
measured on a node-sized process.
"""

from __future__ import annotations

import faulthandler
import logging
import mmap
import os
import resource
import select
import signal
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger(__name__)

_INDEX = struct.Struct("q")
PROBE_TIMEOUT_S = 10.0  # a child that reads a batch's headers for this long is hung
HUNG_RETRIES = 1  # a hung probe is tried again before its record is quarantined


class HasHeaders(Protocol):
    def headers(self) -> object: ...


@dataclass(frozen=True, slots=True)
class Poison:
    """A record whose headers the Kafka client cannot read without failing or crashing."""

    index: int  # position in the probed batch
    reason: str  # why: the dead-letter reason


class HeaderProbe:
    """Finds the records of a batch whose ``headers()`` would fail or crash this process."""

    def __init__(self, timeout: float = PROBE_TIMEOUT_S) -> None:
        self.timeout = timeout
        self._progress = mmap.mmap(-1, _INDEX.size)  # MAP_SHARED: the child's writes are seen
        self.probes = 0  # children started (for tests and metrics)

    def poison(self, records: Sequence[HasHeaders]) -> list[Poison]:
        """The poison records of ``records``, by index; every other record is safe to read."""
        found: list[Poison] = []
        start = 0
        hung = 0
        while start < len(records):
            outcome = self._probe(records, start)
            if outcome is None:
                break
            index, reason, was_hung = outcome
            if was_hung and hung < HUNG_RETRIES:
                hung += 1  # the machine may just be slow: try the same record again
                continue
            hung = 0
            found.append(Poison(index, reason))
            start = index + 1
        return found

    def _probe(self, records: Sequence[HasHeaders], start: int) -> tuple[int, str, bool] | None:
        """Read the headers of records[start:] in a child. None if all were read; otherwise the
        index of the record being read when the child failed, the reason, and whether it hung."""
        _INDEX.pack_into(self._progress, 0, start)
        self.probes += 1
        pid = os.fork()
        if pid == 0:  # the sacrificial child: read, report progress, never return
            status = 0
            try:
                resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file per poison
                faulthandler.disable()  # an expected crash: no "Fatal Python error" dump
                for index in range(start, len(records)):
                    _INDEX.pack_into(self._progress, 0, index)
                    _read_headers(records[index])
            except BaseException:  # noqa: BLE001 - whatever it is, the child must reach os._exit
                status = 3
            os._exit(status)
        status, hung = self._wait(pid)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            return None
        index = _INDEX.unpack_from(self._progress, 0)[0]
        if hung:
            reason = f"reading the record's headers did not finish within {self.timeout:.0f} s"
        elif os.WIFSIGNALED(status):
            name = signal.Signals(os.WTERMSIG(status)).name
            reason = f"reading the record's headers crashed the Kafka client ({name})"
        else:
            reason = (
                "the Kafka client cannot read the record's headers "
                "(a header name that is not valid UTF-8?)"
            )
        return min(max(index, start), len(records) - 1), reason, hung

    def _wait(self, pid: int) -> tuple[int, bool]:
        """Wait for the child at most ``timeout``; kill it if it hangs."""
        deadline = time.monotonic() + self.timeout
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:  # no pidfd (old kernel): a plain blocking wait
            return _waitpid(pid), False
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    os.kill(pid, signal.SIGKILL)
                    return _waitpid(pid), True
                ready, _, _ = select.select([pidfd], [], [], left)
                if ready:
                    return _waitpid(pid), False
        finally:
            os.close(pidfd)


def _read_headers(record: HasHeaders) -> None:
    """Read a record's headers and touch every pair, as intake will. A failed name decode can
    leave its exception pending until a later call, or a NULL name in the list: walking the list
    here makes either surface (as an exception or a crash) at this record, not a later one."""
    headers = record.headers()
    if headers is None:
        return
    if type(headers) is not list:
        raise TypeError("headers are not a list")
    for pair in headers:
        name, value = pair
        if type(name) is not str or not (value is None or type(value) is bytes):
            raise TypeError("a header is not a (str, bytes | None) pair")
        len(name)


def _waitpid(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:  # pragma: no cover - PEP 475 retries already
            continue
