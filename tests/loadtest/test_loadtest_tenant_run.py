"""A multi-tenant ``run`` end to end against a real Kafka-protocol broker, with the echo relay as
Chronos: the tenant headers on the input, the tenant of every sent and received record, and the
per-tenant analysis of what was recorded."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, TopicPartition

from loadtest.analysis.summary import analyze_dir
from loadtest.harness.relay import EchoRelay
from loadtest.harness.topics import ensure_topics
from tests.loadtest.test_loadtest_integration import _run

TOPICS = ["tenant-input", "tenant-output", "tenant-dead-letter"]
LOAD = (
    *("--flood-count", "200", "--rate", "400", "--flood-at", "2s"),
    *("--small-tenants", "3", "--small-rate", "20", "--small-delay", "500ms", "--duration", "2s"),
    *("--drain-timeout", "10s"),
    *("--input-topic", TOPICS[0], "--output-topic", TOPICS[1], "--dead-letter-topic", TOPICS[2]),
)


def _input_headers(bootstrap: str, run_id: str) -> list[dict[str, bytes]]:
    """The headers of this run's input records."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"t-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    meta = consumer.list_topics(TOPICS[0], timeout=10).topics[TOPICS[0]]
    consumer.assign([TopicPartition(TOPICS[0], p, 0) for p in meta.partitions])
    found: list[dict[str, bytes]] = []
    idle = 0
    while idle < 5:
        batch = consumer.consume(1000, 1.0)
        idle = 0 if batch else idle + 1
        for msg in batch:
            if msg.error() is None:
                headers: dict[str, bytes] = {}
                for item in msg.headers() or []:
                    if isinstance(item[1], bytes):
                        headers[str(item[0])] = item[1]
                if headers.get("loadtestRun") == run_id.encode():
                    found.append(headers)
    consumer.close()
    return found


@pytest.mark.integration
def test_a_multi_tenant_run_records_every_tenant(
    lt_broker: str, spark: Any, tmp_path: Path
) -> None:
    ensure_topics(lt_broker, TOPICS, create_partitions=3)
    relay = EchoRelay(
        bootstrap=lt_broker,
        input_topic=TOPICS[0],
        output_topic=TOPICS[1],
        dead_letter_topic=TOPICS[2],
        start_from="beginning",
    )
    try:
        relay.prepare()
        relay.start()
        tenants, control = tmp_path / "tenants", tmp_path / "control"
        proc = _run(lt_broker, tenants, *LOAD)
        assert proc.returncode == 0, proc.stderr
        proc = _run(lt_broker, control, *LOAD, "--no-tenant-header")
        assert proc.returncode == 0, proc.stderr
    finally:
        relay.stop()
    assert relay.error is None

    run = json.loads((tenants / "run.json").read_text())
    assert run["complete"] is True and run["producer"]["sent"] == 320
    sent = pq.read_table(tenants / "sent.parquet").to_pylist()
    by_id = {r["id"]: r["tenant"] for r in sent}
    assert Counter(by_id.values()) == {"flood": 200, "small-00": 40, "small-01": 40, "small-02": 40}
    flood_deadlines = {r["deadline_ms"] for r in sent if r["tenant"] == "flood"}
    assert flood_deadlines == {run["start_ms"] + 2000}
    received = pq.read_table(tenants / "received.parquet").to_pylist()
    assert len(received) == 320 and all(r["tenant"] == by_id[r["id"]] for r in received)

    headers = _input_headers(lt_broker, run["run_id"])
    assert len(headers) == 320
    assert all(h["chronosTenant"] == h["loadtestTenant"] for h in headers)
    control_run = json.loads((control / "run.json").read_text())
    control_headers = _input_headers(lt_broker, control_run["run_id"])
    assert len(control_headers) == 320
    assert all("chronosTenant" not in h and "loadtestTenant" in h for h in control_headers)

    summary = analyze_dir(spark, tenants)
    classes = summary["tenants"]["classes"]
    assert (classes["flood"]["fired"], classes["small"]["fired"]) == (200, 120)
    assert summary["tenants"]["flood_drain"]["count"] == 200
    assert {t["tenant"] for t in summary["tenants"]["per_tenant"]} == set(by_id.values())
    assert (tenants / "tenants.png").exists()
