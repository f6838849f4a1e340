"""Trace a node's intake consumer: every (partition, offset) it hands to intake, and every offset
stored, seek, commit and rebalance, to find a record the node never consumed.

A test hook of the intake process (``chronos.intake.child`` runs ``CHRONOS_TEST_INJECT`` before it
imports Chronos): with

    CHRONOS_TEST_INJECT=loadtest.probes.intake_trace:install
    CHRONOS_TEST_INTAKE_TRACE=/some/dir

in a node's environment (the benchmark passes them with ``--node-env``), the intake process writes
``/some/dir/intake-<pid>.trace``, one line per event:

    <monotonic s> consume <n records> <partition>:<first>-<last> ...  (runs of consecutive offsets)
    <monotonic s> GAP <partition> expected <offset> got <offset>     (offsets skipped)
    <monotonic s> BACK <partition> expected <offset> got <offset>    (offsets read again)
    <monotonic s> store <partition>:<offset> ...
    <monotonic s> seek|assign|revoke|lost|commit|committed|stats ...

Nothing of it runs without the hook; Chronos itself is unchanged.

    python -m loadtest.probes.intake_trace TRACE [--missing PARTITION:OFFSET ...]

summarises a trace: gaps, rewinds, and for each given offset whether intake received it.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

TRACE_ENV = "CHRONOS_TEST_INTAKE_TRACE"


class _Trace:
    def __init__(self, path: Path) -> None:
        self._file = path.open("a", buffering=1)
        self._lock = threading.Lock()
        self.expected: dict[int, int] = {}

    def line(self, text: str) -> None:
        with self._lock:
            self._file.write(f"{time.monotonic():.6f} {text}\n")

    def received(self, records: list[Any]) -> None:
        spans: dict[int, list[list[int]]] = {}  # per partition, runs of consecutive offsets
        notes: list[str] = []
        errors = 0
        for record in records:
            if record.error() is not None:
                errors += 1
                notes.append(f"error {record.partition()} {record.error()}")
                continue
            partition, offset = int(record.partition()), int(record.offset())
            expected = self.expected.get(partition)
            if expected is not None and offset != expected:
                kind = "GAP" if offset > expected else "BACK"
                notes.append(f"{kind} {partition} expected {expected} got {offset}")
            self.expected[partition] = offset + 1
            runs = spans.setdefault(partition, [])
            if runs and runs[-1][1] + 1 == offset:
                runs[-1][1] = offset
            else:
                runs.append([offset, offset])
        parts = " ".join(
            f"{p}:{first}-{last}" for p, runs in sorted(spans.items()) for first, last in runs
        )
        self.line(f"consume {len(records)} {parts}" + (f" errors={errors}" if errors else ""))
        for note in notes:
            self.line(note)


def _tps(partitions: Any) -> str:
    return " ".join(f"{tp.partition}:{tp.offset}" for tp in partitions or [])


def tracing_consumer_class(trace: _Trace) -> type:
    from confluent_kafka import Consumer

    class TracingConsumer(Consumer):
        def consume(self, *args: Any, **kwargs: Any) -> Any:
            records = super().consume(*args, **kwargs)
            if records:
                trace.received(records)
            return records

        def store_offsets(self, *args: Any, **kwargs: Any) -> Any:
            trace.line(f"store {_tps(kwargs.get('offsets'))}")
            return super().store_offsets(*args, **kwargs)

        def seek(self, partition: Any) -> Any:
            trace.line(f"seek {partition.partition}:{partition.offset}")
            trace.expected.pop(int(partition.partition), None)
            return super().seek(partition)

        def commit(self, *args: Any, **kwargs: Any) -> Any:
            trace.line(f"commit {kwargs}")
            return super().commit(*args, **kwargs)

        def subscribe(
            self,
            topics: list[str],
            on_assign: Callable[..., None] | None = None,
            on_revoke: Callable[..., None] | None = None,
            on_lost: Callable[..., None] | None = None,
        ) -> None:
            super().subscribe(
                topics,
                on_assign=_wrap_rebalance(trace, "on_assign", on_assign),
                on_revoke=_wrap_rebalance(trace, "on_revoke", on_revoke),
                on_lost=_wrap_rebalance(trace, "on_lost", on_lost),
            )

    return TracingConsumer


def _wrap_rebalance(trace: _Trace, name: str, callback: Callable[..., Any] | None) -> Any:
    def wrapped(consumer: Any, partitions: Any) -> None:
        trace.line(f"{name.removeprefix('on_')} {_tps(partitions)}")
        if name == "on_assign":
            for tp in partitions:
                trace.expected.pop(int(tp.partition), None)
        if callback is not None:
            callback(consumer, partitions)

    return wrapped


def _wrap_stats(trace: _Trace, callback: Callable[[str], None] | None) -> Callable[[str], None]:
    def wrapped(stats_json: str) -> None:
        try:
            for topic in json.loads(stats_json).get("topics", {}).values():
                parts = []
                for key, p in topic.get("partitions", {}).items():
                    if int(key) < 0:
                        continue
                    parts.append(
                        f"{key}:hi={p.get('hi_offset')},next={p.get('next_offset')},"
                        f"app={p.get('app_offset')},stored={p.get('stored_offset')},"
                        f"committed={p.get('committed_offset')},fetch={p.get('fetch_state')},"
                        f"q={p.get('fetchq_cnt')}"
                    )
                trace.line("stats " + " ".join(parts))
        except (ValueError, TypeError, AttributeError):
            pass
        if callback is not None:
            callback(stats_json)

    return wrapped


def install() -> None:
    """The test hook: every intake consumer this process makes is a tracing one."""
    directory = os.environ.get(TRACE_ENV)
    if not directory:
        return
    Path(directory).mkdir(parents=True, exist_ok=True)
    trace = _Trace(Path(directory) / f"intake-{os.getpid()}.trace")
    trace.line("started")

    from confluent_kafka import Consumer

    import chronos.kafka
    import chronos.kafka.clients as clients
    from chronos.kafka.config import consumer_config
    from chronos.kafka.consumer_lag import CONSUMER_STATS_INTERVAL_MS

    cls = tracing_consumer_class(trace)

    def make_consumer(settings: Any, **callbacks: Any) -> Consumer:
        conf = consumer_config(settings)
        conf.setdefault("statistics.interval.ms", CONSUMER_STATS_INTERVAL_MS)
        conf.update(callbacks)
        conf["stats_cb"] = _wrap_stats(trace, callbacks.get("stats_cb"))
        on_commit = callbacks.get("on_commit")

        def committed(err: Any, partitions: Any) -> None:
            trace.line(f"committed err={err} {_tps(partitions)}")
            if on_commit is not None:
                on_commit(err, partitions)

        conf["on_commit"] = committed
        return cast(Consumer, cls(conf))

    clients.make_consumer = make_consumer
    chronos.kafka.make_consumer = make_consumer


def summarise(path: Path, missing: list[tuple[int, int]]) -> str:
    received: dict[int, list[tuple[int, int]]] = {}
    notes: list[str] = []
    for raw in path.read_text().splitlines():
        fields = raw.split()
        if len(fields) < 2:
            continue
        if fields[1] == "consume":
            for span in fields[3:]:
                if ":" not in span or "-" not in span:
                    continue
                p, rest = span.split(":", 1)
                first, last = rest.split("/")[0].split("-")  # older traces: first-last/count
                received.setdefault(int(p), []).append((int(first), int(last)))
        elif fields[1] in ("GAP", "BACK", "seek", "assign", "revoke", "lost"):
            notes.append(raw)
    lines = [f"{path}: {sum(len(v) for v in received.values())} spans"]
    lines += notes[:50]
    for partition, offset in missing:
        hit = any(a <= offset <= b for a, b in received.get(partition, []))
        lines.append(f"{partition}:{offset} {'received' if hit else 'NEVER received'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.probes.intake_trace")
    parser.add_argument("trace", type=Path, nargs="+")
    parser.add_argument("--missing", nargs="*", default=[], metavar="PARTITION:OFFSET")
    args = parser.parse_args(argv)
    missing = [(int(a), int(b)) for a, b in (m.split(":") for m in args.missing)]
    for path in args.trace:
        print(summarise(path, missing))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
