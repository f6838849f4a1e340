"""A stand-in for Chronos, for testing the harness itself (not a scheduler to deploy).

It consumes the input topic, holds each record until ``deadline - timing advance`` in an
in-memory heap and then publishes key, value and the non-Chronos headers to the output topic.
Records without valid Chronos headers go to the dead-letter topic with a reason header, as
Chronos does. No persistence, no consumer group: partitions are assigned explicitly.
"""

from __future__ import annotations

import heapq
import threading
import time
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, Producer, TopicPartition

from loadtest.harness import headers as h
from loadtest.harness.kafkautil import FetchStates

Pending = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def parse_deadline_ms(raw: bytes) -> int:
    text = raw.decode("ascii")
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


class EchoRelay(threading.Thread):
    def __init__(
        self,
        *,
        bootstrap: str,
        input_topic: str,
        output_topic: str,
        dead_letter_topic: str | None,
        timing_advance_ms: int = 50,
        start_from: str = "end",
        dead_letter_every: int = 0,
        kafka_properties: dict[str, str] | None = None,
    ) -> None:
        super().__init__(name="echo-relay", daemon=True)
        self.input_topic = input_topic
        self.output_topic = output_topic
        self.dead_letter_topic = dead_letter_topic
        self.timing_advance_ms = timing_advance_ms
        self.dead_letter_every = dead_letter_every  # test hook: reject every N-th record
        self.stop_event = threading.Event()
        self.relayed = 0
        self.dead_lettered = 0
        self.error: BaseException | None = None
        self._records = 0
        self._initial: list[Pending] = []
        self._start_from = start_from
        self._ready = threading.Event()
        common: dict[str, Any] = {"bootstrap.servers": bootstrap, **(kafka_properties or {})}
        self._fetch = FetchStates()
        self._consumer = Consumer(
            {
                **common,
                **self._fetch.config(),
                "group.id": "chronos-loadtest-echo-relay",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 20,
            }
        )
        self._producer = Producer(
            {**common, "linger.ms": 2, "batch.num.messages": 10_000, "acks": "all"}
        )

    def prepare(self, timeout_s: float = 15.0) -> None:
        metadata = self._consumer.list_topics(self.input_topic, timeout=timeout_s)
        info = metadata.topics[self.input_topic]
        if info.error is not None:
            raise RuntimeError(f"input topic {self.input_topic!r}: {info.error}")
        start = OFFSET_END if self._start_from == "end" else OFFSET_BEGINNING
        parts = [TopicPartition(self.input_topic, p, start) for p in sorted(info.partitions)]
        self._consumer.assign(parts)
        pending: list[Pending] = []
        self._fetch.wait(
            parts, lambda: self._take(self._consumer.consume(1000, 0.05), pending), timeout_s
        )
        self._initial = pending
        self._ready.set()

    def _take(self, messages: list[Any], heap: list[Pending]) -> None:
        for msg in messages:
            if msg.error() is not None:
                continue
            mid: bytes | None = None
            deadline_raw: bytes | None = None
            relayed: list[tuple[str, bytes | None]] = []
            for name, value in msg.headers() or ():
                if name == h.CHRONOS_MESSAGE_ID:
                    mid = value
                elif name == h.CHRONOS_DEADLINE:
                    deadline_raw = value
                else:
                    relayed.append((name, value))
            reason: str | None = None
            deadline_ms = 0
            if not mid:
                reason = f"missing header {h.CHRONOS_MESSAGE_ID}"
            elif not deadline_raw:
                reason = f"missing header {h.CHRONOS_DEADLINE}"
            else:
                try:
                    deadline_ms = parse_deadline_ms(deadline_raw)
                except (ValueError, UnicodeDecodeError):
                    reason = f"header {h.CHRONOS_DEADLINE} is not ISO-8601"
            self._records += 1
            every = self.dead_letter_every
            if reason is None and every and self._records % every == 0:
                reason = "rejected by the echo relay (test hook)"
            if reason is not None:
                if self.dead_letter_topic:
                    out = list(msg.headers() or ())
                    out.append((h.DEAD_LETTER_REASON, reason.encode()))
                    self._produce(self.dead_letter_topic, msg.key(), msg.value(), out)
                self.dead_lettered += 1
                continue
            seq = msg.offset() * 1024 + msg.partition()
            heapq.heappush(heap, (deadline_ms, seq, msg.key(), msg.value(), relayed))

    def _produce(
        self, topic: str, key: bytes | None, value: bytes | None, headers: list[Any]
    ) -> None:
        while True:
            try:
                self._producer.produce(topic, value, key, headers=headers)
                return
            except BufferError:
                self._producer.poll(0.01)

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - reported through .error
            self.error = exc

    def _loop(self) -> None:
        self._ready.wait()
        heap = self._initial
        heapq.heapify(heap)
        advance = self.timing_advance_ms
        while not self.stop_event.is_set():
            now = time.time_ns() // 1_000_000
            while heap and heap[0][0] - advance <= now:
                _, _, key, value, headers = heapq.heappop(heap)
                self._produce(self.output_topic, key, value, headers)
                self.relayed += 1
            self._producer.poll(0)
            wait = 0.05 if not heap else max(0.0, min(0.05, (heap[0][0] - advance - now) / 1000))
            self._take(self._consumer.consume(5000, wait), heap)
        self._producer.flush(10)

    def stop(self) -> None:
        self.stop_event.set()
        if self.is_alive():
            self.join()
        else:
            self._producer.flush(10)
        self._consumer.close()
