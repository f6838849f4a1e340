"""Intake in its own process: the metrics merge, the child's environment, and the node's side of
the child's lifecycle (a stand-in child speaking the same wire)."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections import Counter as Tally
from typing import Any, ClassVar

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from chronos.config.settings import load
from chronos.errors import ChronosError
from chronos.intake.child import Link
from chronos.intake.process import IntakeProcess, child_environment
from chronos.observability.relay import MergedRegistry, expose_process, snapshot
from tests.unit.helpers import settings


def _registry(consumed: float, age: float, partitions: list[int]) -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("chronos_consumed_messages_total", "c", registry=registry).inc(consumed)
    Gauge("chronos_running_statement_age_seconds", "a", registry=registry).set(age)
    assigned = Gauge("chronos_assigned_partition", "p", ["topic", "partition"], registry=registry)
    for p in partitions:
        assigned.labels("in", str(p)).set(1)
    Histogram("chronos_batch_size_messages", "b", ["operation"], buckets=(1, 10), registry=registry)
    Counter("other_total", "not shipped", registry=registry).inc()
    return registry


def _samples(text: str) -> dict[str, float]:
    return {
        s.name + str(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_merged_exposition_has_each_family_once_with_both_processes_values() -> None:
    node = _registry(consumed=0, age=0.5, partitions=[])
    child = _registry(consumed=7, age=2.0, partitions=[0, 2])
    child_histogram = list(child.collect())[3]
    assert child_histogram.name == "chronos_batch_size_messages"
    merged = MergedRegistry(node)
    merged.receive(snapshot(child))
    text = generate_latest(merged).decode()

    names = Tally(f.name for f in text_string_to_metric_families(text))
    assert [n for n, count in names.items() if count > 1] == []
    samples = _samples(text)
    assert samples["chronos_consumed_messages_total[]"] == 7  # counters add up
    assert samples["chronos_running_statement_age_seconds[]"] == 2.0  # the larger one
    assert samples["chronos_assigned_partition[('partition', '2'), ('topic', 'in')]"] == 1
    assert "other_total[]" in samples  # the node's own families stay
    assert sum(1 for name in samples if name.startswith("other_total")) == 1  # not shipped twice


def test_histograms_add_up_bucket_by_bucket_and_created_keeps_the_earliest() -> None:
    node = CollectorRegistry()
    child = CollectorRegistry()
    ours = Histogram("chronos_h", "h", buckets=(1, 10), registry=node)
    time.sleep(0.01)
    theirs = Histogram("chronos_h", "h", buckets=(1, 10), registry=child)
    ours.observe(0.5)
    theirs.observe(5)
    theirs.observe(50)
    merged = MergedRegistry(node)
    merged.receive(snapshot(child))
    samples = _samples(generate_latest(merged).decode())
    assert samples["chronos_h_bucket[('le', '1.0')]"] == 1
    assert samples["chronos_h_bucket[('le', '10.0')]"] == 2
    assert samples["chronos_h_bucket[('le', '+Inf')]"] == 3
    assert samples["chronos_h_count[]"] == 3
    assert samples["chronos_h_sum[]"] == 55.5
    created = {f.name: f for f in node.collect()}["chronos_h"].samples[-1]
    assert created.name == "chronos_h_created"
    assert samples["chronos_h_created[]"] == created.value


def test_the_child_gets_the_nodes_resolved_settings_and_no_stray_chronos_variable() -> None:
    config = settings(node_id="5f0c7a40-0000-4000-8000-000000000001", poll_interval_ms=77)
    env = child_environment(
        config,
        {"PATH": "/bin", "CHRONOS_POLL_INTERVAL_MS": "5", "CHRONOS_FAULT_KILL_AT": "x"},
    )
    assert env["PATH"] == "/bin"
    assert env["CHRONOS_FAULT_KILL_AT"] == "x"  # test hooks pass on
    rebuilt = load(environ={k: v for k, v in env.items() if k != "CHRONOS_FAULT_KILL_AT"})
    assert rebuilt == config


# A stand-in for chronos.intake.child: reports a status line, then obeys the node's "stop" (or
# exits unasked with the given status).
_CHILD = """
import json, os, socket, sys
sock = socket.socket(fileno=int(sys.argv[-2]))
status = {"op": "status", "age": 0.25, "assigned": [["in", 1]],
          "metrics": [{"name": "chronos_x", "type": "counter", "help": "x", "unit": "",
                       "samples": [["chronos_x_total", {}, 3.0]]}]}
sock.sendall(json.dumps(status).encode() + b"\\n")
mode = sys.argv[1]
if mode == "obey":
    line = sock.makefile("rb").readline()
    sys.exit(0 if json.loads(line)["op"] == "stop" else 5)
sys.exit(int(mode))
"""


def _process(mode: str) -> tuple[IntakeProcess, MergedRegistry]:
    registry = MergedRegistry(CollectorRegistry())
    return IntakeProcess(settings(), registry, (sys.executable, "-c", _CHILD, mode)), registry


def _run(loop: IntakeProcess) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            loop.run()
        except BaseException as exc:  # noqa: BLE001 - returned to the test, which asserts on it
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, errors


def _wait(condition: Any, timeout: float = 10.0) -> bool:
    limit = time.monotonic() + timeout
    while time.monotonic() < limit and not condition():
        time.sleep(0.01)
    return bool(condition())


def test_a_stopped_child_reports_its_state_and_ends_the_loop_cleanly() -> None:
    loop, registry = _process("obey")
    before = time.monotonic()
    thread, errors = _run(loop)
    assert _wait(lambda: loop.assigned == {("in", 1)})
    assert before - 0.25 <= loop.progress_at() <= time.monotonic() - 0.25
    samples = _samples(generate_latest(registry).decode())
    assert samples["chronos_x_total[]"] == 3.0
    loop.stop()
    thread.join(10)
    assert not thread.is_alive()
    assert errors == []


@pytest.mark.parametrize("status", ["0", "3"])
def test_a_child_that_exits_unasked_fails_the_loop(status: str) -> None:
    loop, _ = _process(status)
    thread, errors = _run(loop)
    thread.join(10)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], ChronosError)
    assert f"exited with status {status} unasked" in str(errors[0])


def test_a_stop_asked_before_the_child_started_still_reaches_it() -> None:
    loop, _ = _process("obey")
    loop.stop()
    thread, errors = _run(loop)
    thread.join(10)
    assert not thread.is_alive()
    assert errors == []


class _IntakeLoop:
    assigned: ClassVar[set[tuple[str, int]]] = {("in", 0)}
    warm = threading.Event()

    def progress_at(self) -> float:
        return time.monotonic()


def _in_thread(call: Any, timeout: float = 30.0) -> Any:
    """``call()`` on a thread; fails the test (instead of hanging it) if it never returns."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "blocked"
    return result[0]


def test_status_lines_never_block_the_intake_process_when_the_node_reads_nothing() -> None:
    """A paused node reads nothing: its intake process keeps running, drops the statuses the
    socket cannot take, never tears a line, and its last status still reaches the node."""
    node_end, child_end = socket.socketpair()
    with node_end, child_end:
        child_end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        link = Link(child_end, _IntakeLoop())

        def fill() -> int:
            for sent in range(10_000):
                if not link.send_status():
                    return sent
            return -1

        sent = _in_thread(fill)
        assert sent > 0  # the socket took some: the node is not gone, only not reading
        assert not _in_thread(link.send_status)  # full: dropped, at once
        assert link.dropped == 2

        received = b""
        node_end.settimeout(10)
        closing = threading.Thread(target=link.close, daemon=True)
        closing.start()  # waits (bounded) for the node to read
        while not received.endswith(b"\n") or len(received.split(b"\n")) < sent + 2:
            received += node_end.recv(1 << 16)
        closing.join(10)
        assert not closing.is_alive()
    lines = received.split(b"\n")[:-1]
    assert len(lines) == sent + 1  # every status taken, whole, then the final one
    assert all(json.loads(line)["op"] == "status" for line in lines)
    assert json.loads(lines[-1])["assigned"] == [["in", 0]]


def test_each_process_reports_its_cpu_time_and_memory_under_its_role() -> None:
    node, child = CollectorRegistry(), CollectorRegistry()
    expose_process("node", node)
    expose_process("node", node)  # once per process
    expose_process("intake", child)
    merged = MergedRegistry(node)
    merged.receive(snapshot(child))
    text = generate_latest(merged).decode()
    samples = _samples(text)
    for role in ("node", "intake"):
        assert samples[f"chronos_process_resident_memory_bytes[('process', '{role}')]"] > 0
        assert samples[f"chronos_process_cpu_seconds_total[('process', '{role}')]"] >= 0
    names = Tally(f.name for f in text_string_to_metric_families(text))
    assert names["chronos_process_cpu_seconds"] == 1
    assert sum(1 for name in samples if name.startswith("chronos_process_resident")) == 2
