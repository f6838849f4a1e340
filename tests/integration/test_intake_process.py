"""A ``chronos run`` node is two OS processes: the node and its intake process (real Postgres, the
real broker, real node processes).

The node fires what its intake process consumed, serves the intake process's metrics on its one
``/metrics``, drains both at SIGTERM, stops non-zero when the intake process dies, never
leaves the intake process consuming on its own when the node is killed, and is paused whole by the
fault suite (as a container freeze pauses it).
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support import Topics, consume
from tests.support.checker import due_in, send
from tests.support.cluster import Cluster, NodeProcess
from tests.support.polling import eventually

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(
    migrated_database_url: str, kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> Iterator[Cluster]:
    nodes = Cluster(migrated_database_url, kafka_bootstrap, topics, tmp_path)
    yield nodes
    nodes.close()


def intake_processes(node: NodeProcess) -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process(node.pid).children()
        if "chronos.intake.child" in child.cmdline()
    ]


def started(cluster: Cluster) -> tuple[NodeProcess, psutil.Process]:
    node = cluster.start()
    cluster.wait_ready([node])
    cluster.wait_assigned([node])
    children = intake_processes(node)
    assert len(children) == 1, children
    return node, children[0]


def gone(process: psutil.Process, timeout: float) -> bool:
    try:
        process.wait(timeout)
    except psutil.TimeoutExpired:
        return False
    return True


def test_the_node_fires_what_its_intake_process_consumed_and_serves_its_metrics(
    cluster: Cluster, kafka_bootstrap: str, topics: Topics
) -> None:
    node, intake = started(cluster)
    assert intake.pid != node.pid
    # CHRONOS_INTAKE_NICENESS (10): consuming yields the CPU to the node's firing timers.
    assert intake.nice() == min(psutil.Process(node.pid).nice() + 10, 19)
    assert node.assignment() == {(topics.input, p) for p in range(topics.partitions)}

    message = due_in(2)
    send(kafka_bootstrap, topics.input, [message])
    fired = consume(kafka_bootstrap, topics.output, 1, timeout=30)
    assert [r.value() for r in fired] == [message.value]

    assert eventually(lambda: node.metric("chronos_consumed_messages_total") >= 1, 10)
    assert node.metric("chronos_enqueued_messages_total") == 1
    # The node's own counter counts a delivery once its report is in: on Apache Kafka a consumer
    # can read the record before the producer's acknowledgement reaches the node.
    assert eventually(lambda: node.metric("chronos_fired_messages_total") == 1, 10)
    assert node.metric('chronos_batch_size_messages_count{operation="enqueue"}') >= 1
    for role in ("node", "intake"):  # each process's own CPU time and memory
        assert node.metric(f'chronos_process_resident_memory_bytes{{process="{role}"}}') > 0
        assert node.metric(f'chronos_process_cpu_seconds_total{{process="{role}"}}') > 0
    text = requests.get(f"http://127.0.0.1:{node.settings.http_port}/metrics", timeout=10).text
    names = Counter(family.name for family in text_string_to_metric_families(text))
    assert [name for name, count in names.items() if count > 1] == []

    assert node.terminate() == 0
    assert gone(intake, 5)


def test_sigkill_of_the_node_leaves_no_intake_process_behind(cluster: Cluster) -> None:
    node, intake = started(cluster)
    node.kill()
    assert gone(intake, 5), "the intake process outlived its node"


def test_sigterm_reaching_both_processes_still_drains_and_exits_0(cluster: Cluster) -> None:
    """A terminal's Ctrl-C or a process-group signal reaches both: the node decides."""
    node, intake = started(cluster)
    intake.send_signal(signal.SIGTERM)
    intake.send_signal(signal.SIGINT)
    time.sleep(1)
    assert intake.is_running() and node.alive()
    assert node.terminate() == 0
    assert gone(intake, 5)


def test_a_dead_intake_process_stops_the_node_non_zero(cluster: Cluster) -> None:
    node, intake = started(cluster)
    intake.kill()
    code = node.wait_exit(30)
    assert code is not None, "the node outlived its intake process"
    assert code != 0
    assert any("intake process" in line and "SIGKILL" in line for line in node.lines())


def test_a_pause_stops_the_whole_node_and_its_figures_cover_both_processes(
    cluster: Cluster,
) -> None:
    """The fault suite's pause is a container freeze: the intake process stops with the node; its
    CPU time and memory count in the node's."""
    node, intake = started(cluster)
    supervisor = psutil.Process(node.pid)
    floor = sum(supervisor.cpu_times()[:2]) + sum(intake.cpu_times()[:2])  # CPU time only grows
    assert node.cpu_seconds() >= floor
    # Memory moves a little between two readings; the intake process's tens of MB do not.
    assert node.rss_bytes() > supervisor.memory_info().rss + intake.memory_info().rss / 2

    node.pause()
    try:
        assert eventually(
            lambda: {supervisor.status(), intake.status()} == {psutil.STATUS_STOPPED}, 5
        ), (supervisor.status(), intake.status())
    finally:
        node.resume()
    assert eventually(
        lambda: psutil.STATUS_STOPPED not in {supervisor.status(), intake.status()}, 5
    )
    assert node.terminate() == 0
    assert gone(intake, 5)
