"""The first seconds after "ready", as a new user meets them: does a node that says it is ready
fire on time from its first message?

    python -m loadtest.probes.first_seconds [--runs 3] [--nodes 1] [--broker kafka]
                                            [--after 2] [--duration 15] [--rate 1000]
                                            [--delay 2000-4000] [--late-ms 25]
    python -m loadtest.probes.first_seconds --bootstrap HOST:PORT   # a stack already running

Each run starts ``chronos dev --nodes 1`` on free ports in a fresh data directory (so Postgres,
the broker and the topics are new, as on a first ``chronos dev``), waits for its line
"chronos dev: ready", and ``--after`` seconds later produces ``--rate`` messages a second for
``--duration`` seconds (open loop), each due a uniformly drawn ``--delay`` (ms, both ends
included) after it is sent. A recorder reads the output topic from its beginning; the lateness of
a fired message is its record's timestamp (the fire time) minus its deadline. With
``--bootstrap`` it takes a running stack instead ("ready" is the moment the probe starts).

Prints, per run, the time to ready, the load average, p50/p99/p99.9/max lateness, the messages
missing, and where the late ones (more than ``--late-ms`` late) were: their send order and how
long after the first send they were due. The last line of each run is the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from chronos.embedded import free_port, free_ports

READY_LINE = "chronos dev: ready"
INPUT, OUTPUT = "chronos-input", "chronos-output"
RUN_HEADER, SEQ_HEADER = "probeRun", "probeSeq"
STARTUP_TIMEOUT_S = 180.0


@dataclass
class Figures:
    """One run's figures (milliseconds unless named otherwise)."""

    ready_s: float  # from ``chronos dev`` starting to its ready line (0 with --bootstrap)
    load_before: float  # the 1-minute load average when producing starts
    load_after: float
    sent: int
    fired: int
    missing: int
    p50: float
    p99: float
    p999: float
    max: float
    late: int  # fired more than ``late_ms`` after the deadline
    over_100: int
    late_ms: int
    late_seq: list[int] = field(default_factory=list)  # send order of the late ones (first 20)
    late_due_s: list[float] = field(default_factory=list)  # due, seconds after the first send
    late_by_second: list[int] = field(default_factory=list)  # late ones by second of sending


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted ``values``."""
    if not values:
        return float("nan")
    rank = max(1, min(len(values), int(-(-q * len(values) // 1))))
    return values[rank - 1]


class Stack:
    """``chronos dev`` in a child process, its output copied to a log file."""

    def __init__(self, args: argparse.Namespace, data_dir: Path):
        self.kafka_port = free_port()
        self.http_base = free_ports(args.nodes + 1)
        command = [
            str(Path(sys.executable).with_name("chronos")), "dev",
            "--nodes", str(args.nodes), "--broker", args.broker,
            "--kafka-port", str(self.kafka_port), "--pg-port", str(free_port()),
            "--http-port-base", str(self.http_base), "--data-dir", str(data_dir),
        ]  # fmt: skip
        self.log = (data_dir.parent / "dev.log").open("w")
        self.started = time.monotonic()
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in iter(self.process.stdout.readline, b""):
            line = raw.decode(errors="replace")
            if line.startswith(READY_LINE):
                self.ready.set()
            self.log.write(line)
            self.log.flush()

    def wait_ready(self) -> float:
        """Seconds from the start to the ready line."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self.ready.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"chronos dev did not get ready; see {self.log.name}")
        return time.monotonic() - self.started

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


def deadline_text(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def produce(bootstrap: str, run: str, start: float, args: argparse.Namespace) -> list[int]:
    """Send ``rate * duration`` messages open loop from ``start`` (time.time()); their deadlines
    (epoch ms) in send order."""
    low, high = (int(x) for x in args.delay.split("-"))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    count = int(args.rate * args.duration)
    deadlines: list[int] = []
    rng = random.Random(run)
    time.sleep(max(0.0, start - time.time()))
    for seq in range(count):
        slot = start + seq / args.rate
        wait = slot - time.time()
        if wait > 0:
            time.sleep(wait)
        deadline = int(time.time() * 1000) + rng.randint(low, high)
        deadlines.append(deadline)
        producer.produce(
            INPUT,
            key=f"key-{seq % 1000}".encode(),
            value=os.urandom(100),
            headers=[
                ("chronosMessageId", f"{run}-{seq}".encode()),
                ("chronosDeadline", deadline_text(deadline).encode()),
                (RUN_HEADER, run.encode()),
                (SEQ_HEADER, str(seq).encode()),
            ],
        )
        producer.poll(0)
    producer.flush(120)  # a broker behind on a busy machine: wait for it, do not drop
    return deadlines


def record(bootstrap: str, run: str, until: threading.Event, fired: dict[int, int]) -> None:
    """Read the output topic from its beginning: each message's fire time (first seen)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"probe-{run}", "enable.auto.commit": False}
    )
    partitions = consumer.list_topics(OUTPUT, timeout=10).topics[OUTPUT].partitions
    consumer.assign([TopicPartition(OUTPUT, p, OFFSET_BEGINNING) for p in partitions])
    try:
        while not until.is_set():
            for msg in consumer.consume(500, 0.2):
                if msg.error() is not None:
                    continue
                headers = dict(msg.headers() or [])
                if headers.get(RUN_HEADER) != run.encode():
                    continue
                fired.setdefault(int(headers.get(SEQ_HEADER) or b"-1"), msg.timestamp()[1])
    finally:
        consumer.close()


def measure(bootstrap: str, ready_at: float, ready_s: float, args: argparse.Namespace) -> Figures:
    run = uuid.uuid4().hex[:12]
    fired: dict[int, int] = {}
    done = threading.Event()
    recorder = threading.Thread(target=record, args=(bootstrap, run, done, fired), daemon=True)
    recorder.start()
    start = ready_at + args.after
    time.sleep(max(0.0, start - time.time()))
    load_before = os.getloadavg()[0]
    deadlines = produce(bootstrap, run, start, args)
    give_up = max(deadlines) / 1000 + args.drain
    while len(fired) < len(deadlines) and time.time() < give_up:
        time.sleep(0.2)
    time.sleep(0.5)
    done.set()
    recorder.join(15)
    load_after = os.getloadavg()[0]
    lateness = {seq: fired[seq] - deadlines[seq] for seq in fired if seq < len(deadlines)}
    ordered = sorted(lateness.values())
    late = sorted(seq for seq, ms in lateness.items() if ms > args.late_ms)
    first_ms = start * 1000
    return Figures(
        ready_s=round(ready_s, 1),
        load_before=round(load_before, 2),
        load_after=round(load_after, 2),
        sent=len(deadlines),
        fired=len(lateness),
        missing=len(deadlines) - len(lateness),
        p50=percentile(ordered, 0.5),
        p99=percentile(ordered, 0.99),
        p999=percentile(ordered, 0.999),
        max=ordered[-1] if ordered else float("nan"),
        late=len(late),
        over_100=sum(1 for ms in ordered if ms > 100),
        late_ms=args.late_ms,
        late_seq=late[:20],
        late_due_s=[round((deadlines[s] - first_ms) / 1000, 2) for s in late[:20]],
        late_by_second=[
            sum(1 for s in late if int(s // args.rate) == second)
            for second in range(int(args.duration))
        ],
    )


def one_run(args: argparse.Namespace) -> Figures:
    if args.bootstrap:
        return measure(args.bootstrap, time.time(), 0.0, args)
    workdir = Path(tempfile.mkdtemp(prefix="chronos-first-seconds-"))
    workdir.chmod(0o755)  # as root, Postgres runs as a system user that must reach it
    stack = Stack(args, workdir / "dev")
    try:
        ready_s = stack.wait_ready()
        ready_at = time.time()
        return measure(f"127.0.0.1:{stack.kafka_port}", ready_at, ready_s, args)
    finally:
        stack.stop()
        if args.keep:
            print(f"  kept {workdir}", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def report(index: int, f: Figures) -> None:
    print(
        f"run {index}: ready after {f.ready_s:.1f} s, load {f.load_before:.2f} -> "
        f"{f.load_after:.2f}; {f.fired}/{f.sent} fired, {f.missing} missing; lateness ms "
        f"p50 {f.p50:.0f}, p99 {f.p99:.0f}, p99.9 {f.p999:.0f}, max {f.max:.0f}; "
        f"{f.late} later than {f.late_ms} ms, {f.over_100} later than 100 ms",
        flush=True,
    )
    if f.late:
        pairs = zip(f.late_seq, f.late_due_s, strict=True)
        where = ", ".join(f"#{s} (due +{d:.2f} s)" for s, d in pairs)
        print(f"  late: {where}", flush=True)
        print(f"  late by second of sending: {f.late_by_second}", flush=True)
    print(json.dumps(asdict(f)), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m loadtest.probes.first_seconds")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--broker", default="kafka", choices=("kafka", "tansu"))
    p.add_argument("--bootstrap", default="", help="a running stack's broker (no chronos dev)")
    p.add_argument("--after", type=float, default=2.0, help="seconds after ready to start")
    p.add_argument("--duration", type=float, default=15.0, help="seconds of sending")
    p.add_argument("--rate", type=float, default=1000.0, help="messages a second")
    p.add_argument("--delay", default="2000-4000", help="ms after sending, MIN-MAX")
    p.add_argument("--late-ms", type=int, default=25, help="what counts as late")
    p.add_argument("--drain", type=float, default=15.0, help="seconds to wait after the last due")
    p.add_argument("--keep", action="store_true", help="keep the data directory and its logs")
    args = p.parse_args(argv)
    for i in range(1, args.runs + 1):
        report(i, one_run(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
