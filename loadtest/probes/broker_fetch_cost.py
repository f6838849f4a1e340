"""What the record batches a partition holds cost the embedded broker's fetches: run it when a
long load's input reaches Chronos late, to tell the broker's share from Chronos's.

    python -m loadtest.probes.broker_fetch_cost [--batches 100000] [--seconds 10]

Starts the embedded broker, measures the end-to-end latency (produce -> consumed at the log's
end) of a ~500 msg/s stream and the broker's CPU while it flows; then writes ``--batches``
records one per batch (what a producer sending a few messages per second per partition writes)
and measures the same stream again. On a Kafka broker a fetch finds its position through the
offset index whatever the log holds; on the embedded broker both figures grow with the number of
batches in the partition, so a long benchmark whose input arrives in small batches measures the
broker's fetches as much as Chronos (the multi-tenant scenarios batch their input for this).
"""

from __future__ import annotations

import argparse
import threading
import time

import psutil
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from chronos.embedded import EmbeddedKafka, create_topics

TOPIC = "fetch-cost"
PARTITIONS = 6


def stream(bootstrap: str, broker: psutil.Process, seconds: float) -> tuple[float, float, float]:
    """(p50 s, p99 s, broker cores) of a ~500 msg/s stream read at the log's end."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "fetch-cost", "fetch.wait.max.ms": 100}
    )
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    idle = 0
    while idle < 20:  # read what the log holds first
        idle = 0 if consumer.consume(10_000, 0.1) else idle + 1
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    stop = time.time() + seconds

    def send() -> None:
        while time.time() < stop:
            for _ in range(5):
                producer.produce(TOPIC, value=repr(time.time()).encode())
            producer.poll(0)
            time.sleep(0.01)
        producer.flush()

    cpu0, wall0 = sum(broker.cpu_times()[:2]), time.time()
    sender = threading.Thread(target=send)
    sender.start()
    latencies: list[float] = []
    while time.time() < stop + 3:
        for m in consumer.consume(2000, 0.1):
            if m.error() is None and m.value() is not None:
                latencies.append(time.time() - float(m.value() or b"0"))
    sender.join()
    cores = (sum(broker.cpu_times()[:2]) - cpu0) / (time.time() - wall0)
    consumer.close()
    latencies.sort()
    return latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)], cores


def fill(bootstrap: str, batches: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(batches):
        while True:
            try:
                producer.produce(TOPIC, value=b"x" * 100)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes.broker_fetch_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    broker = EmbeddedKafka(0)
    bootstrap = broker.start()
    try:
        create_topics(bootstrap, {TOPIC: PARTITIONS})
        process = psutil.Process(broker.pid)
        p50, p99, cores = stream(bootstrap, process, args.seconds)
        print(
            f"empty log: latency p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms; "
            f"broker {cores:.2f} cores",
            flush=True,
        )
        fill(bootstrap, args.batches)
        p50, p99, cores = stream(bootstrap, process, args.seconds)
        print(
            f"after {args.batches:,} one-record batches: latency p50 {p50 * 1000:.0f} ms, "
            f"p99 {p99 * 1000:.0f} ms; broker {cores:.2f} cores",
            flush=True,
        )
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
