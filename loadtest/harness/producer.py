"""The open-loop producer: sends Chronos input records at a target rate and logs each one."""

from __future__ import annotations

import os
import random
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from confluent_kafka import KafkaError, Message, Producer

from loadtest.harness import headers as h
from loadtest.harness.delays import BurstDelay, Delay, FixedDelay
from loadtest.harness.events import (
    FOLLOWUPS_FILE,
    FOLLOWUPS_SCHEMA,
    PRODUCE_ERRORS_SCHEMA,
    SENT_SCHEMA,
    ParquetSink,
)
from loadtest.harness.mix import Mix, MixCounts, MixPlanner, Planned
from loadtest.harness.schedule import LagTracker, PacingResult, RateSchedule, Slots, pace
from loadtest.harness.tenants import PlannedSchedule, TenantLoad
from loadtest.harness.timeutil import DeadlineFormatter

FLUSH_ROWS = 200_000

PRODUCER_DEFAULTS: dict[str, Any] = {
    "linger.ms": 5,
    "batch.num.messages": 10_000,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "acks": "all",
    "enable.idempotence": False,
    # Only failures come back to Python: a per-message callback would cost throughput.
    "delivery.report.only.error": True,
}


@dataclass(slots=True)
class ProducerSettings:
    bootstrap: str
    topic: str
    rate: float
    count: int
    delay: Delay
    payload_bytes: int = 100
    keys: int | None = 1000  # None: null keys
    seed: int | None = None
    behind_threshold_ms: float = 10.0
    kafka_properties: dict[str, str] = field(default_factory=dict)
    tenants: TenantLoad | None = None  # a multi-tenant load: its plan replaces rate and delay
    linger_ms: int = PRODUCER_DEFAULTS["linger.ms"]
    mix: Mix | None = None  # the soak's mix (loadtest.harness.mix): records, not messages


@dataclass(slots=True)
class ProduceStats:
    sent: int = 0  # records
    expected: int = 0  # fires expected of them (rows of sent.parquet)
    produce_errors: int = 0
    queue_full_waits: int = 0
    start_ms: int = 0
    end_ms: int = 0
    flushed_ms: int = 0
    min_deadline_ms: int | None = None
    max_deadline_ms: int | None = None
    unflushed: int = 0
    stopped: bool = False
    pacing: PacingResult | None = None
    tracker: LagTracker | None = None
    mix: MixCounts | None = None

    def as_dict(self) -> dict[str, Any]:
        elapsed = max(self.end_ms - self.start_ms, 1) / 1000
        tracker = self.tracker
        return {
            "sent": self.sent,
            "expected_fires": self.expected,
            "produce_errors": self.produce_errors,
            "unflushed": self.unflushed,
            "queue_full_waits": self.queue_full_waits,
            "start_ms": self.start_ms,
            "end_ms": self.end_ms,
            "flushed_ms": self.flushed_ms,
            "achieved_rate": round(self.sent / elapsed, 1),
            "min_deadline_ms": self.min_deadline_ms,
            "max_deadline_ms": self.max_deadline_ms,
            "stopped_early": self.stopped,
            "behind_threshold_ms": None if tracker is None else tracker.threshold_s * 1000,
            "max_lag_ms": None if tracker is None else round(tracker.max_lag_s * 1000, 3),
            "behind_messages": None if tracker is None else tracker.behind_slots,
            "behind_episodes": None
            if tracker is None
            else len(tracker.episodes) + tracker.dropped_episodes,
            "behind_episode_list": []
            if tracker is None
            else [e.as_dict() for e in tracker.episodes[:100]],
            **({} if self.mix is None else {"mix": self.mix.as_dict()}),
        }


def message_id(run_id: str, seq: int) -> str:
    return f"{run_id}-{seq}"


class LoadProducer:
    """Produces ``settings.count`` records following a ``RateSchedule``; thread-safe counters."""

    def __init__(self, settings: ProducerSettings, run_id: str, out_dir: Path) -> None:
        self.settings = settings
        self.run_id = run_id
        self.stats = ProduceStats()
        self.stop_event = threading.Event()
        self._rng = random.Random(settings.seed)
        self._payload = os.urandom(settings.payload_bytes) if settings.payload_bytes else b""
        self._keys: list[bytes] | None = (
            None if settings.keys is None else [f"key-{i}".encode() for i in range(settings.keys)]
        )
        self._sink = ParquetSink(out_dir / "sent.parquet", SENT_SCHEMA)
        self._errors_path = out_dir / "produce_errors.parquet"
        self._followups_path = out_dir / FOLLOWUPS_FILE
        self._planner: MixPlanner | None = None
        self._errors: list[tuple[str, str]] = []
        self._deadlines = array("q")
        self._sent_ms = array("q")
        self._slot_ms = array("q")
        self._tenant_ix = array("h")  # index into the tenant names; -1: no tenant
        self._tenant_names = [] if settings.tenants is None else settings.tenants.tenant_names
        if settings.mix is not None:
            self._tenant_names = settings.mix.tenant_names
        self._key_ix = array("i")  # the mix's key index of each row (the others: seq % keys)
        self._chunk_start = 0
        config: dict[str, Any] = {"bootstrap.servers": settings.bootstrap, **PRODUCER_DEFAULTS}
        config["linger.ms"] = settings.linger_ms
        config.update(settings.kafka_properties)
        config["on_delivery"] = self._on_delivery
        self._producer = Producer(config)

    # -- delivery failures (only failures are reported) ------------------------------------
    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            return
        self.stats.produce_errors += 1
        mid = "?"
        for name, value in list(msg.headers() or ()):
            if name == h.ID and isinstance(value, bytes):
                mid = value.decode("utf-8", "replace")
                break
        if len(self._errors) < 1_000_000:
            self._errors.append((mid, str(err)))

    # -- event log --------------------------------------------------------------------------
    def _flush_chunk(self) -> None:
        first = self._chunk_start
        count = len(self._sent_ms)
        if count == 0:
            return
        deadlines, sent, slots = self._deadlines, self._sent_ms, self._slot_ms
        self._deadlines, self._sent_ms, self._slot_ms = array("q"), array("q"), array("q")
        tenant_ix, self._tenant_ix = self._tenant_ix, array("h")
        key_ix, self._key_ix = self._key_ix, array("i")
        names = pa.array(self._tenant_names, pa.string())
        self._chunk_start = first + count
        prefix = f"{self.run_id}-"
        key_count = None if self._keys is None else len(self._keys)
        payload_bytes = self.settings.payload_bytes

        def build() -> pa.RecordBatch:
            seqs = np.arange(first, first + count, dtype=np.int64)
            ids = pc.binary_join_element_wise(prefix, pc.cast(pa.array(seqs), pa.string()), "")
            if key_count is None:
                keys = pa.nulls(count, pa.string())
            else:
                table = pa.array([f"key-{i}" for i in range(key_count)], pa.string())
                picks = np.frombuffer(key_ix, dtype=np.int32) if len(key_ix) else seqs % key_count
                keys = table.take(pa.array(picks))
            return pa.RecordBatch.from_arrays(
                [
                    ids,
                    keys,
                    pa.array(np.frombuffer(deadlines, dtype=np.int64)),
                    pa.array(np.frombuffer(sent, dtype=np.int64)),
                    pa.array(np.full(count, payload_bytes, dtype=np.int32)),
                    pa.array(np.frombuffer(slots, dtype=np.int64)),
                    names.take(pa.array(np.frombuffer(tenant_ix, dtype=np.int16)))
                    if len(tenant_ix)
                    else pa.nulls(count, pa.string()),
                ],
                schema=SENT_SCHEMA,
            )

        self._sink.put(build)

    # -- the hot path ---------------------------------------------------------------------------
    def run(self) -> ProduceStats:
        s = self.settings
        stats = self.stats
        producer = self._producer
        produce = producer.produce
        poll = producer.poll
        topic = s.topic
        payload = self._payload
        keys = self._keys
        key_count = 0 if keys is None else len(keys)
        delay = s.delay
        rng = self._rng
        fmt = DeadlineFormatter()
        run_b = self.run_id.encode()
        prefix = f"{self.run_id}-"
        deadlines, sent_log, slot_log = self._deadlines, self._sent_ms, self._slot_ms
        time_ns = time.time_ns
        min_deadline: int | None = None
        max_deadline: int | None = None

        mono_start = time.monotonic()
        start_ns = time_ns()
        start_ms = start_ns // 1_000_000
        stats.start_ms = start_ms
        schedule: Slots = RateSchedule(s.rate, mono_start, s.count)
        tracker = LagTracker(s.behind_threshold_ms / 1000, mono_start)
        stats.tracker = tracker
        ms_per_slot = 1000.0 / s.rate
        fixed_ms = delay.delay_ms if isinstance(delay, FixedDelay) else None
        burst_deadline = start_ms + delay.at_ms if isinstance(delay, BurstDelay) else None
        tenants, tenant_log = s.tenants, self._tenant_ix
        plan = None if tenants is None else tenants.plan()
        if tenants is not None and plan is not None:
            schedule = PlannedSchedule(plan.offsets_s, mono_start)
            plan_tenant = plan.tenant.tolist()
            plan_slot_ms = (plan.offsets_s * 1000).astype(np.int64).tolist()
            flood_deadline = start_ms + tenants.flood_at_ms
            small_ms = tenants.small_delay_ms
            tenant_b = [n.encode() for n in tenants.tenant_names]
            chronos_tenant = tenants.header

        def emit(first: int, end: int) -> None:
            nonlocal deadlines, sent_log, slot_log, tenant_log, min_deadline, max_deadline
            for seq in range(first, end):
                now = time_ns() // 1_000_000
                if plan is not None:
                    ti = plan_tenant[seq]
                    deadline = flood_deadline if ti == 0 else now + small_ms
                    tenant_log.append(ti)
                elif fixed_ms is not None:
                    deadline = now + fixed_ms
                elif burst_deadline is not None:
                    deadline = burst_deadline
                else:
                    deadline = delay.deadline_ms(now, start_ms, rng)
                mid = prefix + str(seq)
                headers: list[tuple[str, str | bytes | None]] = [
                    (h.CHRONOS_MESSAGE_ID, mid),
                    (h.CHRONOS_DEADLINE, fmt(deadline)),
                    (h.RUN, run_b),
                    (h.ID, mid),
                    (h.DEADLINE_MS, str(deadline)),
                    (h.SENT_MS, str(now)),
                ]
                if plan is not None:
                    headers.append((h.TENANT, tenant_b[ti]))
                    if chronos_tenant:
                        headers.append((h.CHRONOS_TENANT, tenant_b[ti]))
                key = None if keys is None else keys[seq % key_count]
                while True:
                    try:
                        produce(topic, payload, key, headers=headers)
                        break
                    except BufferError:
                        stats.queue_full_waits += 1
                        poll(0.005)
                deadlines.append(deadline)
                sent_log.append(now)
                slot_log.append(
                    start_ms + (plan_slot_ms[seq] if plan is not None else int(seq * ms_per_slot))
                )
                if min_deadline is None or deadline < min_deadline:
                    min_deadline = deadline
                if max_deadline is None or deadline > max_deadline:
                    max_deadline = deadline
            stats.sent = end
            stats.min_deadline_ms, stats.max_deadline_ms = min_deadline, max_deadline
            poll(0)
            if len(sent_log) >= FLUSH_ROWS:
                self._flush_chunk()
                deadlines, sent_log, slot_log = self._deadlines, self._sent_ms, self._slot_ms
                tenant_log = self._tenant_ix

        def idle() -> None:
            poll(0)

        planner = None
        send: Callable[[int, int], None] = emit
        if s.mix is not None:
            send, planner = self._mix_emit(start_ms, fmt)
        stats.pacing = pace(
            schedule,
            time.monotonic,
            time.sleep,
            send,
            tracker,
            idle=idle,
            should_stop=self.stop_event.is_set,
        )
        stats.stopped = stats.pacing.stopped
        if planner is not None and not stats.stopped:
            now = time_ns() // 1_000_000
            for planned in planner.leftovers(now):
                self._send_planned(planned, now, now)
                stats.sent += 1
        stats.expected = stats.sent if planner is None else planner.fires
        stats.end_ms = time_ns() // 1_000_000
        self._flush_chunk()
        return stats

    # -- the soak's mix ---------------------------------------------------------------------------
    def _mix_emit(
        self, start_ms: int, fmt: DeadlineFormatter
    ) -> tuple[Callable[[int, int], None], MixPlanner]:
        """``emit`` for the mix: each slot's record chosen by a ``MixPlanner``."""
        s, stats = self.settings, self.stats
        assert s.mix is not None
        ms_per_slot = 1000.0 / s.rate
        planner = MixPlanner(
            s.mix,
            s.delay,
            self._rng,
            run_id=self.run_id,
            start_ms=start_ms,
            end_ms=start_ms + int(s.count * ms_per_slot),
            keys=None if self._keys is None else len(self._keys),
            fmt=fmt,
        )
        stats.mix = planner.counts
        self._planner = planner
        time_ns = time.time_ns

        def emit(first: int, end: int) -> None:
            for seq in range(first, end):
                now = time_ns() // 1_000_000
                self._send_planned(planner.next(now), now, start_ms + int(seq * ms_per_slot))
            stats.sent = end
            stats.expected = planner.fires
            self._producer.poll(0)
            if len(self._sent_ms) >= FLUSH_ROWS:
                self._flush_chunk()

        return emit, planner

    def _send_planned(self, planned: Planned, now: int, slot: int) -> None:
        """Produce one record of the mix and log the fires it adds."""
        stats = self.stats
        keys = self._keys
        key = None if keys is None or planned.key_ix < 0 else keys[planned.key_ix]
        while True:
            try:
                self._producer.produce(
                    self.settings.topic, self._payload, key, headers=planned.headers
                )
                break
            except BufferError:
                stats.queue_full_waits += 1
                self._producer.poll(0.005)
        for deadline in planned.deadlines:
            self._deadlines.append(deadline)
            self._sent_ms.append(now)
            self._slot_ms.append(slot)
            if planned.tenant_ix >= 0:
                self._tenant_ix.append(planned.tenant_ix)
            if keys is not None:
                self._key_ix.append(planned.key_ix)
            if stats.min_deadline_ms is None or deadline < stats.min_deadline_ms:
                stats.min_deadline_ms = deadline
            if stats.max_deadline_ms is None or deadline > stats.max_deadline_ms:
                stats.max_deadline_ms = deadline

    def flush(self, timeout_s: float) -> int:
        """Wait for outstanding deliveries; returns how many are still unacknowledged."""
        remaining = self._producer.flush(timeout_s)
        self.stats.unflushed = remaining
        self.stats.flushed_ms = time.time_ns() // 1_000_000
        return remaining

    def close(self) -> None:
        self._sink.close()
        if self._planner is not None and self._planner.followups:
            message_ids, never_ids, fire_ids = zip(*self._planner.followups, strict=True)
            table = pa.Table.from_arrays(
                [pa.array(message_ids), pa.array(never_ids), pa.array(fire_ids, pa.string())],
                schema=FOLLOWUPS_SCHEMA,
            )
            pq.write_table(table, str(self._followups_path))
        if self._errors:
            table = pa.Table.from_pylist(
                [{"id": i, "error": e} for i, e in self._errors], schema=PRODUCE_ERRORS_SCHEMA
            )
            pq.write_table(table, str(self._errors_path))
