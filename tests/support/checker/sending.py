"""Producing what a fault test sends: a batch waited for (``send``), or a steady load from a
background thread (``Load``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from tests.support.checker.sent import Outgoing, due_in


def send(
    bootstrap: str,
    topic: str,
    messages: Sequence[Outgoing],
    *,
    partition: int | None = None,
    config: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
) -> list[tuple[int, int]]:
    """Produce ``messages`` and wait for every delivery; returns (partition, offset) of each."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **(config or {})}
    )
    where: list[tuple[int, int]] = [(-1, -1)] * len(messages)
    errors: list[str] = []

    def report(index: int) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                where[index] = (msg.partition(), msg.offset())

        return on_delivery

    for index, m in enumerate(messages):
        kwargs: dict[str, Any] = {"partition": partition} if partition is not None else {}
        while True:
            try:
                producer.produce(
                    topic,
                    key=m.key,
                    value=m.value,
                    headers=cast(Any, m.headers),
                    on_delivery=report(index),
                    **kwargs,
                )
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(timeout)
    if left or errors:
        raise AssertionError(f"producing to {topic}: {left} undelivered, errors {errors[:3]}")
    return where


class Load:
    """Sends messages at ``rate`` per second from a background thread, each due ``delay``
    seconds (uniform in the range) after it is sent, until ``stop()``."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        *,
        rate: float = 100.0,
        delay: tuple[float, float] = (1.0, 3.0),
        seed: int = 0,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.rate = rate
        self.delay = delay
        self.sent: list[Outgoing] = []
        self.acked: dict[str, tuple[int, int, float]] = {}  # track -> partition, offset, when
        self.errors: list[str] = []
        self._random = __import__("random").Random(seed)
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **(config or {})}
        )
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="checker-load", daemon=True)

    def start(self) -> Load:
        self._thread.start()
        return self

    def _run(self) -> None:
        interval = 1 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            message = due_in(self._random.uniform(*self.delay))
            self._producer.produce(
                self.topic,
                key=message.key,
                value=message.value,
                headers=cast(Any, message.headers),
                on_delivery=self._acked(message.track),
            )
            with self._lock:
                self.sent.append(message)
            self._producer.poll(0)
            next_at += interval
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def _acked(self, track: str) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked[track] = (msg.partition(), msg.offset(), time.time())

        return on_delivery

    def stop(self, timeout: float = 30.0) -> list[Outgoing]:
        """Stop sending, wait for every delivery report; returns everything sent."""
        self._stop.set()
        self._thread.join(10)
        left = self._producer.flush(timeout)
        if left or self.errors:
            raise AssertionError(f"load: {left} undelivered, errors {self.errors[:3]}")
        with self._lock:
            return list(self.sent)
