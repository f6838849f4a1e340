"""Does the embedded broker serve a fetch that skips records it has acknowledged? Chronos out of
the picture: several producers append to one topic at once while a consumer tails it.

    python -m loadtest.probes.broker_fetch_gap [--producers 4] [--partitions 1] [--seconds 20]
                                               [--rate 10000] [--runs 1]

The tailing consumer notes every offset gap it is handed (partition p: expected offset n, got
m > n). Once the producers are done, a fresh consumer reads the whole topic back: a skipped
offset the log holds was acknowledged and kept, yet never served to the tail. Every line but
"0 skipped" is a fetch the broker answered with a later batch than the one at the offset asked
for (a record lost to that consumer: it will never fetch that offset again).

Why (tansu's memory storage, ``dynostore``): a produce moves the partition's high watermark
first, then writes its batch; a fetch lists the batches below the high watermark and returns
those at or after the fetch offset. A fetch between a batch's reservation and its write, once
a later batch (another producer's, on another connection) is written, returns the later batch.
"""

from __future__ import annotations

import argparse
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
from chronos.kafka.config import FETCH_WAIT_MAX_MS

QUIET_S = 5.0


def produce(
    bootstrap: str, topic: str, name: str, count: int, rate: float, failed: list[str]
) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": False,
            "linger.ms": 2,
        }
    )

    def report(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failed.append(str(err))

    started = time.monotonic()
    for n in range(count):
        while True:
            try:
                producer.produce(topic, key=f"{name}-{n}".encode(), value=b"v" * 100,
                                 on_delivery=report)  # fmt: skip
                break
            except BufferError:
                producer.poll(0.01)
        if n % 100 == 0:
            producer.poll(0)
            ahead = started + n / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    left = producer.flush(60)
    if left:
        failed.append(f"{left} records never acknowledged")


def tail(
    bootstrap: str,
    topic: str,
    partitions: int,
    done: threading.Event,
    gaps: list[tuple[int, int, int]],
    ready: threading.Event,
    seen: list[int],
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-tail",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": FETCH_WAIT_MAX_MS,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    expected: dict[int, int] = {}
    quiet_since = time.monotonic()
    ready.set()
    try:
        while not (done.is_set() and time.monotonic() - quiet_since > QUIET_S):
            batch = consumer.consume(1000, 0.2)
            for m in batch:
                if m.error() is not None:
                    continue
                p, o = int(m.partition() or 0), int(m.offset() or 0)
                if p in expected and o > expected[p]:
                    gaps.append((p, expected[p], o))
                expected[p] = o + 1
                seen[0] += 1
            if batch:
                quiet_since = time.monotonic()
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, partitions: int, label: str) -> set[tuple[int, int]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-readback-{label}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    held: set[tuple[int, int]] = set()
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(int(m.partition() or 0))
                    continue
                held.add((int(m.partition() or 0), int(m.offset() or 0)))
    finally:
        consumer.close()
    return held


def run_once(
    bootstrap: str, topic: str, producers: int, partitions: int, seconds: float, rate: float
) -> str:
    create_topics(bootstrap, {topic: partitions})
    per_producer = int(rate * seconds / producers)
    failed: list[str] = []
    gaps: list[tuple[int, int, int]] = []
    done, ready = threading.Event(), threading.Event()
    seen = [0]
    tailer = threading.Thread(
        target=tail, args=(bootstrap, topic, partitions, done, gaps, ready, seen)
    )
    tailer.start()
    ready.wait(30)
    time.sleep(1)
    threads = [
        threading.Thread(
            target=produce,
            args=(bootstrap, topic, f"p{i}", per_producer, rate / producers, failed),
        )
        for i in range(producers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    tailer.join()
    held = read_all(bootstrap, topic, partitions, "1")
    produced = per_producer * producers
    if len(held) < produced:  # the reader's doing or the log's? Read it once more.
        first = len(held)
        held |= read_all(bootstrap, topic, partitions, "2")
        second = f" (read twice: the first read {first:,})"
    else:
        second = ""
    skipped = [(p, o) for p, first, after in gaps for o in range(first, after) if (p, o) in held]
    lines = [
        f"{topic}: {produced:,} produced by {producers}, {len(failed)} failed, "
        f"{len(held):,} in the log{second}, {seen[0]:,} read by the tail, {len(gaps)} gaps in it, "
        f"{len(skipped)} skipped (held by the log, never served to the tail)"
    ]
    for p, first, after in gaps[:10]:
        lines.append(f"  partition {p}: expected offset {first}, got {after}")
    lines += [f"  produce error: {f}" for f in failed[:5]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes.broker_fetch_gap", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=10_000.0, help="records/s, all producers")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    broker = EmbeddedKafka(0)
    bootstrap = broker.start()
    try:
        for run in range(args.runs):
            print(
                run_once(bootstrap, f"gap-{run}", args.producers, args.partitions,
                         args.seconds, args.rate),
                flush=True,
            )  # fmt: skip
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
