"""Test-only faults installed inside a node process before Chronos is imported.

``Cluster.start(env={"CHRONOS_TEST_INJECT": "tests.fault.injections:<function>", ...})`` makes
the node's launcher call ``<function>()`` and then run ``chronos run`` in the same process. This
module must not import Chronos at import time (``skew_wall_clock`` has to patch the clock
before Chronos reads it).
"""

from __future__ import annotations

import datetime as _dt
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

OUTPUT_MAX_BYTES_ENV = "CHRONOS_TEST_OUTPUT_MAX_BYTES"
CLOCK_OFFSET_ENV = "CHRONOS_TEST_CLOCK_OFFSET_S"
REFUSAL_MARK = "chronos-test: output topic refused record"

PROBE_KILLS_ENV = "CHRONOS_TEST_PROBE_KILLS"
PROBE_KILLS_DIR_ENV = "CHRONOS_TEST_PROBE_KILLS_DIR"

REFUSE_LARGE_OUTPUT = "tests.fault.injections:refuse_large_output"
KILL_HEADER_PROBES = "tests.fault.injections:kill_header_probes"
SKEW_WALL_CLOCK = "tests.fault.injections:skew_wall_clock"


def refuse_large_output() -> None:
    """The node's producers refuse records for the output topic larger than
    ``$CHRONOS_TEST_OUTPUT_MAX_BYTES`` (key + value + headers) with the broker's
    MSG_SIZE_TOO_LARGE, reported on the next poll, as a broker enforcing the output topic's
    ``max.message.bytes`` would; other topics (the dead-letter topic) accept them. Each refusal
    prints ``REFUSAL_MARK`` on stderr."""
    from confluent_kafka import KafkaError

    from chronos.kafka import clients as kafka

    limit = int(os.environ[OUTPUT_MAX_BYTES_ENV])
    output = os.environ["CHRONOS_OUTPUT_TOPIC"]
    produce, poll = kafka.KafkaPublisher.produce, kafka.KafkaPublisher.poll

    def size(key: bytes | None, value: bytes | None, headers: Any) -> int:
        extra = sum(len(n) + len(v or b"") for n, v in headers or ())
        return len(key or b"") + len(value or b"") + extra

    def refusing_produce(
        self: Any, topic: str, key: Any, value: Any, headers: Any, on_delivery: Any
    ) -> None:
        if topic == output and size(key, value, headers) > limit:
            print(f"{REFUSAL_MARK} ({size(key, value, headers)} bytes)", file=sys.stderr)
            self.__dict__.setdefault("_refused", []).append(on_delivery)
            return
        produce(self, topic, key, value, headers, on_delivery)

    def refusing_poll(self: Any, timeout: float) -> int:
        refused, self.__dict__["_refused"] = self.__dict__.get("_refused", []), []
        for on_delivery in refused:
            on_delivery(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large"))
        return len(refused) + int(poll(self, timeout))

    setattr(kafka.KafkaPublisher, "produce", refusing_produce)  # noqa: B010
    setattr(kafka.KafkaPublisher, "poll", refusing_poll)  # noqa: B010


def skew_wall_clock() -> None:
    """Shift this process's wall clock as Python sees it (``time.time``, ``time.time_ns``,
    ``datetime.now``/``utcnow``/``today``) by ``$CHRONOS_TEST_CLOCK_OFFSET_S`` seconds; the
    monotonic clock stays true, as on a machine whose clock is merely set wrong.

    (libfaketime cannot do this for a Chronos node: librdkafka waits on condition variables
    with absolute deadlines computed from the faked clock, which glibc's C11 ``cnd_timedwait``
    hands to the kernel unfaked, so every librdkafka timed wait lasts 10 minutes longer, or
    none waits at all.)"""
    offset = float(os.environ[CLOCK_OFFSET_ENV])
    offset_ns = int(offset * 1e9)
    delta = _dt.timedelta(seconds=offset)
    real_time, real_time_ns = time.time, time.time_ns
    base = _dt.datetime

    class SkewedDateTime(base):  # type: ignore[valid-type,misc]
        @classmethod
        def now(cls, tz: _dt.tzinfo | None = None) -> Any:
            return base.now(tz) + delta

        @classmethod
        def utcnow(cls) -> Any:
            return base.now(_dt.UTC).replace(tzinfo=None) + delta

        @classmethod
        def today(cls) -> Any:
            return base.now() + delta

    time.time = lambda: real_time() + offset
    time.time_ns = lambda: real_time_ns() + offset_ns
    _dt.datetime = SkewedDateTime  # type: ignore[misc]


def kill_header_probes() -> None:
    """The first ``$CHRONOS_TEST_PROBE_KILLS`` header probe children to read a record are
    SIGKILLed as they read it, as the OOM killer would kill them; each kill leaves a marker file
    in ``$CHRONOS_TEST_PROBE_KILLS_DIR`` (the children share nothing else with each other)."""
    from chronos.intake import quarantine

    kills = int(os.environ[PROBE_KILLS_ENV])
    directory = Path(os.environ[PROBE_KILLS_DIR_ENV])
    read = quarantine._read_headers

    def killed_read(record: Any) -> None:
        for number in range(kills):
            try:
                os.close(os.open(directory / f"kill-{number}", os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                continue
            os.kill(os.getpid(), signal.SIGKILL)
        read(record)

    quarantine._read_headers = killed_read
