"""What the crash quarantine's header probe costs intake per consumed batch, against intake's own
parse of it: run it after a change to ``chronos.intake.quarantine`` or to the consumed batch size.

    python -m loadtest.probes.probe_cost [--batch 2000] [--rounds 50] [--heap-mb 100]
                                         [--probe inline,process]

Starts the embedded broker, produces one batch of well-formed Chronos records (three headers
each), consumes it with confluent-kafka, then times, on the very same ``Message`` objects: each
probe (``CHRONOS_HEADER_PROBE``: ``inline`` reads and checks every record's headers in this
process; ``process`` forks, reads every header in the child and waits), and intake's own parse
of the batch (read headers and ``parse_record``), in the same process. From the second round on
the headers are read from the message's cache (the first read converts them, inline or in the
parse), so the inline figure is the check it adds to the read intake makes anyway. ``--heap-mb``
pads the process to a node's resident size, since a fork's cost grows with the parent's page
tables. Prints ms per batch, µs
per record, and the ratio of the probe to the parse.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import cast

from confluent_kafka import Consumer, Message, Producer

from chronos.embedded import EmbeddedKafka, create_topics
from chronos.intake.quarantine import HeaderProbe
from chronos.protocol import DEADLINE_HEADER, MESSAGE_ID_HEADER, Headers, parse_record


def _batch(bootstrap: str, size: int) -> list[Message]:
    create_topics(bootstrap, {"probe-cost": 1})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    deadline = (datetime.now(UTC) + timedelta(hours=1)).isoformat(timespec="milliseconds")
    for i in range(size):
        producer.produce(
            "probe-cost",
            key=f"key-{i}".encode(),
            value=b"x" * 200,
            headers=[
                (MESSAGE_ID_HEADER, f"id-{i}".encode()),
                (DEADLINE_HEADER, deadline.encode()),
                ("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
            ],
        )
    producer.flush(30)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "probe-cost",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe(["probe-cost"])
    records: list[Message] = []
    limit = time.monotonic() + 60
    while len(records) < size and time.monotonic() < limit:
        records += [m for m in consumer.consume(size, 1.0) if m.error() is None]
    consumer.close()
    return records


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.probes.probe_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--heap-mb", type=int, default=100)
    parser.add_argument("--probe", default="inline,process", help="the probes to time")
    args = parser.parse_args()
    padding = [bytes(1024) for _ in range(args.heap_mb * 1024)]
    with EmbeddedKafka() as broker:
        records = _batch(broker.bootstrap, args.batch)
    for mode in args.probe.split(","):
        _measure(mode, records, args.rounds, args.heap_mb, len(padding))


def _measure(mode: str, records: list[Message], rounds: int, heap_mb: int, blocks: int) -> None:
    probe = HeaderProbe(inline=mode == "inline")
    probe_s: list[float] = []
    parse_s: list[float] = []
    for _ in range(rounds):
        started = time.perf_counter()
        assert probe.poison(records) == []
        probe_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        for record in records:
            parse_record(record.key(), record.value(), cast(Headers, record.headers()))
        parse_s.append(time.perf_counter() - started)
    probe_ms, parse_ms = statistics.median(probe_s) * 1000, statistics.median(parse_s) * 1000
    n = len(records)
    print(f"[{mode}] batch {n} records, heap +{heap_mb} MB ({blocks} blocks), {rounds} rounds")
    print(f"[{mode}] probe: {probe_ms:.2f} ms per batch ({probe_ms * 1000 / n:.2f} us per record)")
    print(f"[{mode}] parse: {parse_ms:.2f} ms per batch ({parse_ms * 1000 / n:.2f} us per record)")
    print(f"[{mode}] probe / parse: {probe_ms / parse_ms:.2f}")


if __name__ == "__main__":
    main()
