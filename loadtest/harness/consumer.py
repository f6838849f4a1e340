"""The recorder: reads the output and dead-letter topics and logs every record of this run."""

from __future__ import annotations

import threading
import time
from array import array
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

from loadtest.harness import headers as h
from loadtest.harness.events import RECEIVED_SCHEMA, ParquetSink
from loadtest.harness.kafkautil import FetchStates
from loadtest.harness.timeutil import parse_instant_ms

FLUSH_ROWS = 200_000

CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": False,
    "fetch.wait.max.ms": 50,
    "queued.max.messages.kbytes": 262_144,
}


@dataclass(slots=True)
class ConsumeStats:
    output_records: int = 0
    dead_letter_records: int = 0
    distinct_ids: int = 0  # ids seen at least once on either topic
    output_duplicates: int = 0  # extra copies on the output topic
    foreign_records: int = 0  # records of other runs (or without tracking headers), ignored
    errors: list[str] = field(default_factory=list)
    partitions: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "output_records": self.output_records,
            "dead_letter_records": self.dead_letter_records,
            "distinct_ids": self.distinct_ids,
            "output_duplicates": self.output_duplicates,
            "foreign_records": self.foreign_records,
            "errors": self.errors[:20],
            "partitions": self.partitions,
        }


class OutputRecorder(threading.Thread):
    """Consumes ``output_topic`` and ``dead_letter_topic`` without a consumer group.

    Partitions are assigned explicitly at the current end (or the beginning) of each topic; the
    ``loadtestRun`` header filters out records of other runs, so an end offset that a broker
    misreports on the low side only costs reading a few old records.

    A record of a series (the soak's mix, ``loadtest.harness.mix``: it carries
    ``loadtestEveryMs``) is numbered by its occurrence: the tracking number plus the periods
    between the first deadline and the instant the node relays beside it (``chronosScheduledFor``),
    and its deadline is that instant. ``expected`` sizes the flags of the ids seen; they grow
    for the numbers beyond it.
    """

    def __init__(
        self,
        *,
        bootstrap: str,
        output_topic: str,
        dead_letter_topic: str | None,
        run_id: str,
        expected: int,
        out_dir: Path,
        start_from: str = "end",
        kafka_properties: dict[str, str] | None = None,
        window: int = 20_000,
    ) -> None:
        super().__init__(name="output-recorder", daemon=True)
        self.output_topic = output_topic
        self.dead_letter_topic = dead_letter_topic
        self.run_id = run_id
        self.stats = ConsumeStats()
        self.stop_event = threading.Event()
        self.recent_lateness: deque[int] = deque(maxlen=window)
        self._start_from = start_from
        self._seen = bytearray(expected)
        self._output_seen = bytearray(expected)
        self._sink = ParquetSink(out_dir / "received.parquet", RECEIVED_SCHEMA)
        self._tenant_numbers: dict[bytes, int] = {}
        self._tenant_names: list[str] = []
        self._new_buffers()
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": f"chronos-loadtest-{run_id}",
            **CONSUMER_DEFAULTS,
        }
        config.update(kafka_properties or {})
        self._fetch = FetchStates()
        config.update(self._fetch.config())
        self._consumer = Consumer(config)

    def _new_buffers(self) -> None:
        self._seq = array("q")
        self._topic_ix = array("b")
        self._partition = array("i")
        self._offset = array("q")
        self._deadline = array("q")
        self._publish = array("q")
        self._receive = array("q")
        self._reasons: dict[int, str] = {}
        self._tenants: dict[int, int] = {}  # record index -> tenant number (only records with one)

    # -- setup -----------------------------------------------------------------------------------
    def topics(self) -> list[str]:
        return [self.output_topic] + ([self.dead_letter_topic] if self.dead_letter_topic else [])

    def prepare(self, timeout_s: float = 15.0) -> None:
        """Assign every partition and wait until the start offsets are resolved."""
        metadata = self._consumer.list_topics(timeout=timeout_s)
        start = OFFSET_END if self._start_from == "end" else OFFSET_BEGINNING
        assignment: list[TopicPartition] = []
        for topic in self.topics():
            info = metadata.topics.get(topic)
            if info is None or info.error is not None or not info.partitions:
                raise RuntimeError(f"topic {topic!r} not found on the broker")
            self.stats.partitions[topic] = len(info.partitions)
            assignment += [TopicPartition(topic, p, start) for p in sorted(info.partitions)]
        self._consumer.assign(assignment)
        self._fetch.wait(assignment, lambda: self._consume_batch(0.05), timeout_s)

    # -- loop -----------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self._consume_batch(0.1)
        except Exception as exc:  # noqa: BLE001 - surfaced through stats.errors
            self.stats.errors.append(f"recorder crashed: {exc!r}")

    def _consume_batch(self, timeout_s: float) -> None:
        messages = self._consumer.consume(num_messages=1000, timeout=timeout_s)
        if not messages:
            return
        receive_ms = time.time_ns() // 1_000_000
        self._record(messages, receive_ms)
        if len(self._seq) >= FLUSH_ROWS:
            self._flush_chunk()

    def _record(self, messages: Sequence[Any], receive_ms: int) -> None:
        stats = self.stats
        run_b = self.run_id.encode()
        prefix_len = len(self.run_id) + 1
        dead_letter_topic = self.dead_letter_topic
        seen, output_seen = self._seen, self._output_seen
        limit = len(seen)
        lateness = self.recent_lateness
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF and len(stats.errors) < 1000:
                    stats.errors.append(str(err))
                continue
            run = mid = deadline_raw = reason = tenant = every = instant = None
            for name, value in msg.headers() or ():
                if name == h.RUN:
                    run = value
                elif name == h.ID:
                    mid = value
                elif name == h.DEADLINE_MS:
                    deadline_raw = value
                elif name == h.DEAD_LETTER_REASON:
                    reason = value
                elif name == h.TENANT:
                    tenant = value
                elif name == h.EVERY_MS:
                    every = value
                elif name == h.SCHEDULED_FOR:
                    instant = value
            if run != run_b or mid is None or deadline_raw is None:
                stats.foreign_records += 1
                continue
            try:
                seq = int(mid[prefix_len:])
                deadline = int(deadline_raw)
            except ValueError:
                stats.foreign_records += 1
                continue
            if every is not None and instant is not None:
                try:
                    at = parse_instant_ms(instant)
                    seq += round((at - deadline) / int(every))
                    deadline = at
                except (ValueError, ZeroDivisionError, UnicodeDecodeError):
                    pass
            if seq >= limit:
                limit = self._grow(seq)
            publish_ms = msg.timestamp()[1]
            is_dead = msg.topic() == dead_letter_topic
            index = len(self._seq)
            self._seq.append(seq)
            self._topic_ix.append(1 if is_dead else 0)
            self._partition.append(msg.partition())
            self._offset.append(msg.offset())
            self._deadline.append(deadline)
            self._publish.append(publish_ms)
            self._receive.append(receive_ms)
            if tenant is not None:
                self._tenants[index] = self._tenant_number(tenant)
            if 0 <= seq < limit and not seen[seq]:
                seen[seq] = 1
                stats.distinct_ids += 1
            if is_dead:
                stats.dead_letter_records += 1
                self._reasons[index] = (reason or b"").decode("utf-8", "replace")
            else:
                stats.output_records += 1
                lateness.append(publish_ms - deadline)
                if 0 <= seq < limit:
                    if output_seen[seq]:
                        stats.output_duplicates += 1
                    else:
                        output_seen[seq] = 1

    def _grow(self, seq: int) -> int:
        """Room in the flags of the ids seen for number ``seq``: the new limit."""
        size = max(seq + 1, 2 * len(self._seen))
        extra = size - len(self._seen)
        self._seen.extend(bytes(extra))
        self._output_seen.extend(bytes(extra))
        return size

    def _tenant_number(self, raw: bytes) -> int:
        number = self._tenant_numbers.get(raw)
        if number is None:
            number = self._tenant_numbers[raw] = len(self._tenant_names)
            self._tenant_names.append(raw.decode("utf-8", "replace"))
        return number

    def _flush_chunk(self) -> None:
        count = len(self._seq)
        if count == 0:
            return
        seq, topic_ix, part, off = self._seq, self._topic_ix, self._partition, self._offset
        deadline, publish, receive, reasons, tenants = (
            self._deadline,
            self._publish,
            self._receive,
            self._reasons,
            self._tenants,
        )
        tenant_names = list(self._tenant_names)
        self._new_buffers()
        prefix = f"{self.run_id}-"
        names = pa.array([self.output_topic, self.dead_letter_topic or ""], pa.string())

        def build() -> pa.RecordBatch:
            seqs = pa.array(np.frombuffer(seq, dtype=np.int64))
            ids = pc.binary_join_element_wise(prefix, pc.cast(seqs, pa.string()), "")
            dead = np.frombuffer(topic_ix, dtype=np.int8)
            reason_col = [reasons.get(i) for i in range(count)] if reasons else None
            return pa.RecordBatch.from_arrays(
                [
                    ids,
                    names.take(pa.array(dead.astype(np.int64))),
                    pa.array(np.frombuffer(part, dtype=np.int32)),
                    pa.array(np.frombuffer(off, dtype=np.int64)),
                    pa.array(np.frombuffer(deadline, dtype=np.int64)),
                    pa.array(np.frombuffer(publish, dtype=np.int64)),
                    pa.array(np.frombuffer(receive, dtype=np.int64)),
                    pa.array(dead.astype(bool)),
                    pa.array(reason_col, pa.string())
                    if reason_col
                    else pa.nulls(count, pa.string()),
                    pa.array(
                        [
                            None if i not in tenants else tenant_names[tenants[i]]
                            for i in range(count)
                        ],
                        pa.string(),
                    )
                    if tenants
                    else pa.nulls(count, pa.string()),
                ],
                schema=RECEIVED_SCHEMA,
            )

        self._sink.put(build)

    def stop(self) -> None:
        """Stop the loop (the caller joins), flush the log and close the consumer."""
        self.stop_event.set()
        if self.is_alive():
            self.join()
        self._flush_chunk()
        self._consumer.close()
        self._sink.close()
