"""``run``: produce at a target rate, record the output, write the event log and ``run.json``."""

from __future__ import annotations

import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtest.harness.consumer import OutputRecorder
from loadtest.harness.delays import Delay
from loadtest.harness.events import RUN_FILE, DrainWindow
from loadtest.harness.mix import Mix
from loadtest.harness.producer import LoadProducer, ProducerSettings
from loadtest.harness.progress import ProgressLine, Snapshot, percentile_of
from loadtest.harness.tenants import TenantLoad
from loadtest.harness.timeutil import iso_utc, now_ms
from loadtest.harness.topics import ensure_topics

SECRET_WORDS = ("password", "secret", "token", "oauthbearer.config", "ssl.key.pem")


@dataclass(slots=True)
class RunConfig:
    bootstrap: str
    input_topic: str
    output_topic: str
    dead_letter_topic: str | None
    rate: float
    count: int
    delay: Delay
    out_dir: Path
    duration_s: float | None = None
    payload_bytes: int = 100
    keys: int | None = 1000
    drain_timeout_s: float = 30.0
    grace_s: float = 60.0
    settle_s: float = 1.0
    timing_advance_ms: int = 50
    behind_threshold_ms: float = 10.0
    start_from: str = "end"
    create_topics: int | None = None
    seed: int | None = None
    progress: bool = True
    flush_timeout_s: float = 60.0
    produce_only: bool = False  # send and flush, record nothing (a background load)
    kafka_properties: dict[str, str] = field(default_factory=dict)
    tenants: TenantLoad | None = None  # a multi-tenant load (its plan gives count and deadlines)
    linger_ms: int = 5  # the input producer's linger.ms
    mix: Mix | None = None  # the soak's mix: count is records, the fires expected follow


@dataclass(slots=True)
class RunResult:
    run_id: str
    out_dir: Path
    sent: int
    received_distinct: int
    complete: bool
    metadata: dict[str, Any]


def _masked(props: dict[str, str]) -> dict[str, str]:
    return {
        k: ("***" if any(w in k.lower() for w in SECRET_WORDS) else v) for k, v in props.items()
    }


def _prepare_out_dir(out_dir: Path) -> None:
    if out_dir.exists() and any(out_dir.iterdir()):
        raise RuntimeError(f"output directory {out_dir} is not empty")
    out_dir.mkdir(parents=True, exist_ok=True)


def run_load(cfg: RunConfig) -> RunResult:
    _prepare_out_dir(cfg.out_dir)
    run_id = uuid.uuid4().hex[:12]
    topics = [cfg.input_topic, cfg.output_topic] + (
        [cfg.dead_letter_topic] if cfg.dead_letter_topic else []
    )
    partitions = ensure_topics(
        cfg.bootstrap,
        topics,
        create_partitions=cfg.create_topics,
        kafka_properties=cfg.kafka_properties,
    )
    recorder: OutputRecorder | None = (
        None
        if cfg.produce_only
        else OutputRecorder(
            bootstrap=cfg.bootstrap,
            output_topic=cfg.output_topic,
            dead_letter_topic=cfg.dead_letter_topic,
            run_id=run_id,
            expected=cfg.count,
            out_dir=cfg.out_dir,
            start_from=cfg.start_from,
            kafka_properties=cfg.kafka_properties,
        )
    )
    if recorder is not None:
        recorder.prepare()
        recorder.start()
    producer = LoadProducer(
        ProducerSettings(
            bootstrap=cfg.bootstrap,
            topic=cfg.input_topic,
            rate=cfg.rate,
            count=cfg.count,
            delay=cfg.delay,
            payload_bytes=cfg.payload_bytes,
            keys=cfg.keys,
            seed=cfg.seed,
            behind_threshold_ms=cfg.behind_threshold_ms,
            kafka_properties=cfg.kafka_properties,
            tenants=cfg.tenants,
            linger_ms=cfg.linger_ms,
            mix=cfg.mix,
        ),
        run_id,
        cfg.out_dir,
    )
    phase = ["sending"]
    t0 = time.monotonic()

    def snapshot() -> Snapshot:
        ps = producer.stats
        received = 0 if recorder is None else recorder.stats.distinct_ids
        window = [] if recorder is None else list(recorder.recent_lateness)
        return Snapshot(
            elapsed_s=time.monotonic() - t0,
            phase=phase[0],
            sent=ps.sent,
            total=cfg.count,
            received=received,
            in_flight=max(0, (ps.sent if cfg.mix is None else ps.expected) - received),
            lateness_p99_ms=percentile_of(window, 0.99),
            behind=0 if ps.tracker is None else ps.tracker.behind_slots,
            dead_letter=0 if recorder is None else recorder.stats.dead_letter_records,
        )

    progress = ProgressLine(snapshot, enabled=cfg.progress)
    progress.start()
    started_ms = now_ms()
    interrupted = False
    complete = False
    window_end_ms: int | None = None
    grace_end_ms: int | None = None
    received_at_window_end: int | None = None
    try:
        try:
            producer.run()
        except KeyboardInterrupt:
            interrupted = True
            producer.stop_event.set()
        phase[0] = "flushing"
        producer.flush(cfg.flush_timeout_s)
        phase[0] = "draining"
        stats = producer.stats
        expected = stats.expected - stats.produce_errors - stats.unflushed
        last_deadline = stats.max_deadline_ms or now_ms()
        # The window ends drain_timeout after the last deadline; what arrives after it, during
        # the bounded grace, is late (classified by the analysis), and only what never arrives
        # is lost.
        window_end_ms = last_deadline + int(cfg.drain_timeout_s * 1000)
        grace_end_ms = window_end_ms + int(cfg.grace_s * 1000)
        complete_since: float | None = None
        while not interrupted and recorder is not None:
            now = now_ms()
            if recorder.stats.distinct_ids >= expected:
                complete = True
                if complete_since is None:
                    complete_since = time.monotonic()
                if time.monotonic() - complete_since >= cfg.settle_s:
                    break
            if received_at_window_end is None and now >= window_end_ms:
                received_at_window_end = recorder.stats.distinct_ids
                phase[0] = "grace"
            if now >= grace_end_ms or not recorder.is_alive():
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        ended_ms = now_ms()
        if recorder is not None:
            recorder.stop()
        progress.stop()
        producer.close()

    ps = producer.stats
    metadata: dict[str, Any] = {
        "run_id": run_id,
        "start_ms": ps.start_ms or started_ms,
        "end_ms": ended_ms,
        "start": iso_utc(ps.start_ms or started_ms),
        "end": iso_utc(ended_ms),
        "complete": complete,
        "interrupted": interrupted,
        "drain": DrainWindow(
            window_end_ms=window_end_ms,
            grace_end_ms=grace_end_ms,
            grace_s=cfg.grace_s,
            ended_ms=ended_ms,
            received_at_window_end=received_at_window_end,
            received_at_end=0 if recorder is None else recorder.stats.distinct_ids,
        ).as_dict(),
        "params": {
            "bootstrap": cfg.bootstrap,
            "input_topic": cfg.input_topic,
            "output_topic": cfg.output_topic,
            "dead_letter_topic": cfg.dead_letter_topic,
            "rate": cfg.rate,
            "duration_s": cfg.duration_s,
            "count": cfg.count,
            "delay": cfg.delay.describe(),
            "tenants": None if cfg.tenants is None else cfg.tenants.describe(),
            "payload_bytes": cfg.payload_bytes,
            "keys": cfg.keys,
            "timing_advance_ms": cfg.timing_advance_ms,
            "drain_timeout_s": cfg.drain_timeout_s,
            "grace_s": cfg.grace_s,
            "behind_threshold_ms": cfg.behind_threshold_ms,
            "start_from": cfg.start_from,
            "seed": cfg.seed,
            "kafka_properties": _masked(cfg.kafka_properties),
            "produce_only": cfg.produce_only,
            "linger_ms": cfg.linger_ms,
            "mix": None if cfg.mix is None else cfg.mix.as_dict(),
        },
        "topics": partitions,
        "producer": ps.as_dict(),
        "consumer": None if recorder is None else recorder.stats.as_dict(),
    }
    (cfg.out_dir / RUN_FILE).write_text(json.dumps(metadata, indent=2) + "\n")
    received = 0 if recorder is None else recorder.stats.distinct_ids
    return RunResult(run_id, cfg.out_dir, ps.sent, received, complete, metadata)


def print_outcome(result: RunResult) -> None:
    meta = result.metadata
    prod, cons = meta["producer"], meta["consumer"]
    if cons is None:
        print(
            f"run {result.run_id}: sent {prod['sent']} at {prod['achieved_rate']}/s "
            f"(produce only); results in {result.out_dir}",
            file=sys.stderr,
        )
        return
    lines = [
        f"run {result.run_id}: sent {prod['sent']} at {prod['achieved_rate']}/s "
        f"(max lag {prod['max_lag_ms']} ms, {prod['behind_messages']} sent behind schedule, "
        f"{prod['produce_errors']} produce errors)",
        f"received {cons['distinct_ids']} distinct ({cons['output_records']} output records, "
        f"{cons['output_duplicates']} duplicate copies, {cons['dead_letter_records']} dead-letter, "
        f"{cons['foreign_records']} other records ignored); complete: {meta['complete']}",
        f"results in {result.out_dir}",
    ]
    for line in lines:
        print(line, file=sys.stderr)
