"""Does the embedded broker keep every record it acknowledges? Run it when a benchmark reports a
message lost that no Chronos log explains: it replays the benchmark's input side without Chronos.

    python -m loadtest.probes.broker_log_audit [--records 100000] [--rate 9000] [--runs 1]

Starts the embedded broker and produces ``--records`` records into a fresh topic the way the
load generator does (its producer settings: acks=all, no idempotence, batches of up to 10,000)
from two producers at once (the benchmark's ``intake`` scenario runs a precision stream beside
the intake load), with a delivery report per record keeping the partition and offset the broker
acknowledged, while a consumer reads every partition from its beginning, fetching as the records
are appended (as intake does), until the log stays quiet; the probe reports each acknowledged
record it did not read back: the offset the broker gave it, and
what the log holds at that offset (another record: overwritten; nothing: a gap). Any line but
"0 missing" is a loss by the broker, with Chronos out of the picture.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from chronos.embedded import EmbeddedKafka, create_topics
from chronos.kafka import consumer_config
from loadtest.harness.producer import PRODUCER_DEFAULTS
from loadtest.probes.firing_loop import probe_settings

PARTITIONS = 6
PRECISION_SHARE = 10  # one record in ten comes from the second producer


def produce(
    bootstrap: str,
    topic: str,
    ids: range,
    rate: float,
    acked: dict[str, tuple[int, int]],
    failed: list[str],
) -> None:
    config = {**PRODUCER_DEFAULTS, "bootstrap.servers": bootstrap}
    config["delivery.report.only.error"] = False  # every acknowledgement, with its offset
    producer = Producer(config)
    lock = threading.Lock()

    def report(err: KafkaError | None, msg: Message) -> None:
        key = (msg.key() or b"").decode()
        with lock:
            if err is None:
                acked[key] = (int(msg.partition() or 0), int(msg.offset() or 0))
            else:
                failed.append(f"{key}: {err}")

    started = time.monotonic()
    for n, i in enumerate(ids):
        key = f"r{i:09d}"
        while True:
            try:
                producer.produce(
                    topic,
                    key=key.encode(),
                    value=b"v" * 100,
                    headers=_headers(key),
                    on_delivery=report,
                )
                break
            except BufferError:
                producer.poll(0.01)
        if n % 500 == 0:
            producer.poll(0)
            ahead = started + n / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    left = producer.flush(120)
    if left:
        failed.append(f"{left} records never acknowledged")


def _headers(key: str) -> list[tuple[str, str | bytes | None]]:
    """Headers the size and number of the load generator's."""
    now = str(int(time.time() * 1000)).encode()
    return [
        ("chronosMessageId", key.encode()),
        ("chronosDeadline", b"2026-01-01T00:00:00.000Z"),
        ("loadtestRun", b"audit"),
        ("loadtestId", key.encode()),
        ("loadtestDeadlineMs", now),
        ("loadtestSentMs", now),
    ]


def read_back(
    bootstrap: str, topic: str, expected: int, ready: threading.Event, as_node: bool
) -> dict[tuple[int, int], str]:
    if as_node:
        # A node's consumer exactly (its librdkafka settings, a group subscription, its batch
        # size), without the rest of Chronos.
        settings = probe_settings(
            kafka_bootstrap_servers=bootstrap, input_topic=topic, consumer_group=f"{topic}-node"
        )
        consumer = Consumer({**consumer_config(settings), "logger": logging.getLogger("audit")})
        consumer.subscribe([topic])
        batch_size = settings.consume_batch_size
        while not consumer.assignment():
            consumer.consume(batch_size, 0.2)
    else:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{topic}-audit",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
            }
        )
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        batch_size = 10_000
    ready.set()
    log: dict[tuple[int, int], str] = {}
    quiet_since = time.monotonic()
    try:
        while time.monotonic() - quiet_since < 10 and len(log) < expected + 1:
            batch = consumer.consume(batch_size, 0.5)
            for m in batch:
                if m.error() is None:
                    log[(int(m.partition() or 0), int(m.offset() or 0))] = (m.key() or b"").decode()
            if batch:
                quiet_since = time.monotonic()
    finally:
        consumer.close()
    return log


def audit(bootstrap: str, topic: str, records: int, rate: float, as_node: bool = False) -> str:
    create_topics(bootstrap, {topic: PARTITIONS})
    acked: dict[str, tuple[int, int]] = {}
    failed: list[str] = []
    second = records // PRECISION_SHARE
    threads = [
        threading.Thread(
            target=produce, args=(bootstrap, topic, range(second, records), rate, acked, failed)
        ),
        threading.Thread(
            target=produce,
            args=(bootstrap, topic, range(second), rate / PRECISION_SHARE, acked, failed),
        ),
    ]
    # The reader fetches while the producers append, as intake does (a fetch served during an
    # append is where a broker could skip a batch).
    logs: list[dict[tuple[int, int], str]] = []
    ready = threading.Event()
    reader = threading.Thread(
        target=lambda: logs.append(read_back(bootstrap, topic, records, ready, as_node)),
        name="reader",
    )
    reader.start()
    ready.wait(60)
    time.sleep(1)  # the reader has its assignment and fetches at the log's end
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reader.join()
    log = logs[0]
    read = set(log.values())
    missing = sorted(k for k in acked if k not in read)
    lines = [
        f"{topic}: {records:,} produced, {len(acked):,} acknowledged, {len(failed)} failed, "
        f"{len(log):,} read back, {len(missing)} missing"
    ]
    for key in missing[:20]:
        partition, offset = acked[key]
        there = log.get((partition, offset))
        what = f"the log holds {there} there (overwritten)" if there else "nothing there (a gap)"
        lines.append(f"  {key}: acknowledged at {partition}/{offset}; {what}")
    lines += [f"  produce error: {f}" for f in failed[:5]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes.broker_log_audit", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument(
        "--rate", type=float, default=9_000.0, help="records/s of the first producer"
    )
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument(
        "--as-node",
        action="store_true",
        help="read with a node's consumer (its settings, a group subscription, its batch size)",
    )
    args = parser.parse_args(argv)
    broker = EmbeddedKafka(0)
    bootstrap = broker.start()
    try:
        for run in range(args.runs):
            topic = f"audit-{run}"
            print(audit(bootstrap, topic, args.records, args.rate, args.as_node), flush=True)
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
