"""How fast the embedded broker carries a burst produced the way a node fires it, without
Chronos: run it when a burst scenario drains slowly, to see how much of its time the broker needs.

    python -m loadtest.probes.broker_burst [--records 50000] [--runs 1]

Starts the embedded broker and a consumer reading the topic from its beginning, then produces
``--records`` records at once the way a node fires them (an idempotent producer with the firing
producer's batching settings, a delivery callback per record, three headers and a 100-byte value
each) and reports when the last one was acknowledged and when the last one was consumed, with the
broker's CPU and this process's (producer and consumer) per record. The burst scenarios of the
benchmark drain through the same broker.
"""

from __future__ import annotations

import argparse
import threading
import time

import psutil
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from chronos.embedded import EmbeddedKafka, create_topics

PARTITIONS = 6
HEADERS: list[tuple[str, str | bytes | None]] = [
    ("chronosMessageId", b"burst-0000000001"),
    ("chronosDeadline", b"2026-11-24T00:00:00.000Z"),
    ("trace", b"0af7651916cd43dd8448eb211c80319c"),
]


def burst(bootstrap: str, broker: psutil.Process, topic: str, records: int) -> str:
    create_topics(bootstrap, {topic: PARTITIONS})
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic, "fetch.wait.max.ms": 100}
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    received, last = [0], [0.0]

    def consume() -> None:
        give_up = time.monotonic() + 120
        while received[0] < records and time.monotonic() < give_up:
            for m in consumer.consume(10_000, 0.2):
                if m.error() is None:
                    received[0] += 1
                    last[0] = time.monotonic()

    reader = threading.Thread(target=consume)
    reader.start()
    time.sleep(2)  # the consumer has its assignment and fetches at the log's end
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "batch.num.messages": 10_000,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": max(100_000, 2 * records),
            "partitioner": "murmur2_random",
        }
    )
    acked, failed = [0], [0]

    def report(err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            acked[0] += 1
        else:
            failed[0] += 1

    me = psutil.Process()
    broker_cpu0, my_cpu0 = sum(broker.cpu_times()[:2]), sum(me.cpu_times()[:2])
    started = time.monotonic()
    for i in range(records):
        producer.produce(
            topic, value=b"v" * 100, key=f"key-{i}".encode(), headers=HEADERS, on_delivery=report
        )
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(60)
    all_acked = time.monotonic() - started
    reader.join()
    consumed = last[0] - started
    broker_cpu = sum(broker.cpu_times()[:2]) - broker_cpu0
    my_cpu = sum(me.cpu_times()[:2]) - my_cpu0
    consumer.close()
    return (
        f"{records:,} records: acknowledged {acked[0]:,} ({failed[0]} failed) in {all_acked:.2f} s "
        f"= {acked[0] / all_acked:,.0f}/s; consumed {received[0]:,} by {consumed:.2f} s "
        f"= {received[0] / max(consumed, 1e-9):,.0f}/s; CPU per record: broker "
        f"{broker_cpu / records * 1e6:.1f} us, producer and consumer "
        f"{my_cpu / records * 1e6:.1f} us"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes.broker_burst", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    broker = EmbeddedKafka(0)
    bootstrap = broker.start()
    try:
        process = psutil.Process(broker.pid)
        for run in range(args.runs):
            print(burst(bootstrap, process, f"burst-{run}", args.records), flush=True)
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
