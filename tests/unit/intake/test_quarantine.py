"""The header probe reads each record's headers in a sacrificial child process and names the
records whose reading fails, crashes or hangs; the parent never reads those
(chronos.intake.quarantine).

Fake records stand in for ``confluent_kafka.Message``: their ``headers()`` misbehaves in the ways
the real client can (an exception, a crash by signal, a hang, a malformed result). The real
client's crash is exercised end to end by tests/fault/test_13_poison_headers.py.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import time
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from chronos.intake.quarantine import HeaderProbe


class Record:
    def __init__(self, behaviour: str = "ok", once: Path | None = None):
        """``once``: misbehave only in the first child that reads this record (a marker file
        tells the children apart: a child's own memory dies with it)."""
        self.behaviour = behaviour
        self.once = once
        self.reads = 0

    def headers(self) -> object:
        self.reads += 1
        if self.once is not None:
            try:
                os.close(os.open(self.once, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return [("name", b"value")]
        if self.behaviour == "oom_kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.behaviour == "memory_error":
            raise MemoryError
        if self.behaviour == "raise":
            raise SystemError("returned a result with an exception set")
        if self.behaviour == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.behaviour == "abort":
            os.abort()
        if self.behaviour == "hang":
            time.sleep(60)
        if self.behaviour == "bad_pair":
            return [("ok", b"1"), (None, b"2")]
        if self.behaviour == "none":
            return None
        return [("name", b"value"), ("empty", None)]


def test_a_clean_batch_has_no_poison_and_takes_one_child() -> None:
    probe = HeaderProbe()
    records = [Record() for _ in range(50)] + [Record("none")]
    assert probe.poison(records) == []
    assert probe.probes == 1
    assert all(r.reads == 0 for r in records), "the parent must not read headers while probing"


def test_an_empty_batch_starts_no_child() -> None:
    probe = HeaderProbe()
    assert probe.poison([]) == []
    assert probe.probes == 0


@pytest.mark.parametrize(
    ("behaviour", "words"),
    [
        ("raise", "cannot read"),
        ("segv", "SIGSEGV"),
        ("abort", "SIGABRT"),
        ("bad_pair", "cannot read"),
    ],
)
def test_each_poison_record_is_named_with_a_reason(behaviour: str, words: str) -> None:
    probe = HeaderProbe()
    records = [Record(), Record(behaviour), Record(), Record(), Record(behaviour), Record()]
    found = probe.poison(records)
    assert found is not None and [p.index for p in found] == [1, 4]
    assert all(words in p.reason for p in found), found
    # One child, then for each poison record one more that fails at it again (reproducibly)
    # and one that goes on after it.
    assert probe.probes == 5


def test_poison_at_both_ends_of_the_batch() -> None:
    probe = HeaderProbe()
    records = [Record("segv"), Record(), Record("raise")]
    found = probe.poison(records)
    assert found is not None and [p.index for p in found] == [0, 2]


def test_a_hung_read_is_killed_retried_once_then_quarantined() -> None:
    probe = HeaderProbe(timeout=0.5)
    records = [Record(), Record("hang"), Record()]
    started = time.monotonic()
    found = probe.poison(records)
    assert found is not None and [p.index for p in found] == [1]
    assert "did not finish" in found[0].reason
    assert probe.probes == 3  # the hang, its retry, then the rest of the batch
    assert time.monotonic() - started < 5


def failures(cause: str) -> float:
    value = REGISTRY.get_sample_value("chronos_header_probe_failures_total", {"cause": cause})
    return value or 0.0


class Waits:
    """The loop's wait, recorded; ``stop_after`` waits it reports the loop stopping."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.delays: list[float] = []
        self.stop_after = stop_after

    def __call__(self, seconds: float) -> bool:
        self.delays.append(seconds)
        return self.stop_after is not None and len(self.delays) >= self.stop_after


@pytest.mark.parametrize("behaviour", ["oom_kill", "memory_error"])
def test_a_probe_stopped_by_the_machine_blames_no_record(behaviour: str, tmp_path: Path) -> None:
    """The OOM killer's SIGKILL, or MemoryError in the child, says nothing about the record it
    was reading: the probe runs again (after a back-off) and the good record is kept."""
    waits = Waits()
    probe = HeaderProbe(wait=waits)
    before = failures("killed")
    records = [Record(), Record(behaviour, once=tmp_path / "once"), Record()]
    assert probe.poison(records) == []
    assert probe.probes == 2 and len(waits.delays) == 1
    assert failures("killed") == before + 1


def test_a_crash_that_does_not_repeat_blames_no_record(tmp_path: Path) -> None:
    probe = HeaderProbe()
    records = [Record(), Record("segv", once=tmp_path / "once"), Record()]
    assert probe.poison(records) == []
    assert probe.probes == 2


def test_a_failed_fork_is_retried_with_back_off(monkeypatch: pytest.MonkeyPatch) -> None:
    real_fork = os.fork
    refusals = [OSError(errno.EAGAIN, "Resource temporarily unavailable")] * 3

    def fork() -> int:
        if refusals:
            raise refusals.pop()
        return real_fork()

    monkeypatch.setattr(os, "fork", fork)
    waits = Waits()
    before = failures("fork")
    probe = HeaderProbe(wait=waits)
    assert probe.poison([Record(), Record()]) == []
    assert len(waits.delays) == 3 and waits.delays[2] > waits.delays[0] / 2
    assert failures("fork") == before + 3


def test_a_stop_while_the_probe_waits_to_be_retried_returns_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fork() -> int:
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(os, "fork", fork)
    probe = HeaderProbe(wait=Waits(stop_after=2))
    assert probe.poison([Record()]) is None


# -- inline (CHRONOS_HEADER_PROBE=inline, the default) ---------------------------------------


def test_inline_a_clean_batch_is_read_once_each_without_a_child() -> None:
    probe = HeaderProbe(inline=True)
    records = [Record() for _ in range(50)] + [Record("none")]
    assert probe.poison(records) == []
    assert probe.probes == 0, "no child is forked inline"
    assert [r.reads for r in records] == [1] * len(records)


@pytest.mark.parametrize("behaviour", ["raise", "bad_pair"])
def test_inline_a_failed_read_is_poison_and_never_read_again(behaviour: str) -> None:
    records = [Record(), Record(behaviour), Record(), Record(behaviour)]
    found = HeaderProbe(inline=True).poison(records)
    assert found is not None
    assert [p.index for p in found] == [1, 3]
    assert all("cannot read" in p.reason for p in found), found
    assert [r.reads for r in records] == [1, 1, 1, 1], "a poison record's headers: one read"


def test_inline_the_real_clients_first_failure_is_caught() -> None:
    class Undecodable:
        def headers(self) -> object:
            return b"\xff\xfe".decode()  # what the client raises for a lone bad name

    found = HeaderProbe(inline=True).poison([Record(), Undecodable()])
    assert found is not None
    assert [p.index for p in found] == [1]
    assert "UnicodeDecodeError" in found[0].reason


def test_inline_out_of_memory_blames_no_record() -> None:
    with pytest.raises(MemoryError):
        HeaderProbe(inline=True).poison([Record(), Record("memory_error")])


def _with_holes(length: int, kind: str) -> object:
    """A tuple or list of ``length`` NULL slots, as the client leaves for a name it could not
    decode (touching a slot would crash this process)."""
    new = getattr(ctypes.pythonapi, "PyTuple_New" if kind == "tuple" else "PyList_New")
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_ssize_t]
    return new(length)


class Holed:
    """A record whose first read succeeds but returns a list with a hole in it."""

    def __init__(self, where: str) -> None:
        self.where = where

    def headers(self) -> object:
        if self.where == "pair":
            return [("ok", b"1"), _with_holes(2, "tuple")]
        return _with_holes(1, "list")


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "process"])
@pytest.mark.parametrize("where", ["pair", "list"])
def test_a_hole_the_client_left_is_found_without_touching_it(inline: bool, where: str) -> None:
    found = HeaderProbe(inline=inline).poison([Record(), Holed(where), Record()])
    assert found is not None
    assert [p.index for p in found] == [1]
    assert "cannot read" in found[0].reason
