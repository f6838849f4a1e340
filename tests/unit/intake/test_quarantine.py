"""The header probe reads each record's headers in a sacrificial child process and names the
records whose reading fails, crashes or hangs; the parent never reads those
(chronos.intake.quarantine).

Fake records stand in for ``confluent_kafka.Message``: their ``headers()`` misbehaves in the ways
the real client can (an exception, a crash by signal, a hang, a malformed result). The real
client's crash is exercised end to end by tests/fault/test_13_poison_headers.py.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from chronos.intake.quarantine import HeaderProbe


class Record:
    def __init__(self, behaviour: str = "ok"):
        self.behaviour = behaviour
        self.reads = 0

    def headers(self) -> object:
        self.reads += 1
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
    assert [p.index for p in found] == [1, 4]
    assert all(words in p.reason for p in found), found
    assert probe.probes == 3  # one child, then one more after each poison record


def test_poison_at_both_ends_of_the_batch() -> None:
    probe = HeaderProbe()
    records = [Record("segv"), Record(), Record("raise")]
    assert [p.index for p in probe.poison(records)] == [0, 2]


def test_a_hung_read_is_killed_retried_once_then_quarantined() -> None:
    probe = HeaderProbe(timeout=0.5)
    records = [Record(), Record("hang"), Record()]
    started = time.monotonic()
    found = probe.poison(records)
    assert [p.index for p in found] == [1]
    assert "did not finish" in found[0].reason
    assert probe.probes == 3  # the hang, its retry, then the rest of the batch
    assert time.monotonic() - started < 5
