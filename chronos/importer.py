"""``chronos import FILE``: schedule every row of a JSON Lines or Parquet file through the client.

Each row has ``id`` (optional: a new UUID), ``deadline`` (ISO-8601, or a datetime in Parquet) or
``delay`` (seconds from now), ``key`` and ``value`` (text as UTF-8, or bytes in Parquet; null
kept), ``headers`` (an object of name -> text, optional), and optionally ``topic`` (chronosTopic).
Records are produced as fast as the broker takes them (the producer batches; a full local queue
is drained, not dropped), and the command waits for every delivery report. A progress line goes
to stderr. Parquet needs pyarrow (in the dev set, not in the slim one `make dev` installs).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from chronos import client
from chronos.config.settings import Settings, reveal_properties
from chronos.errors import ChronosError, ConfigError
from chronos.protocol import parse_deadline


@dataclass(frozen=True, slots=True)
class ImportResult:
    rows: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def read_rows(path: Path) -> Iterator[Mapping[str, Any]]:
    """The rows of a ``.parquet`` file (with pyarrow) or of a JSON Lines file (anything else)."""
    if path.suffix.lower() in (".parquet", ".pq"):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError(
                f"{path}: reading Parquet needs pyarrow (pip install pyarrow, or `make test`'s "
                "dev set); JSON Lines needs nothing"
            ) from None
        for batch in pq.ParquetFile(path).iter_batches(batch_size=10_000):
            yield from batch.to_pylist()
        return
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError as exc:
                    raise ConfigError(f"{path}:{number}: not JSON: {exc}") from None


def _deadline(row: Mapping[str, Any], now: datetime) -> tuple[datetime | None, float | None]:
    deadline, delay = row.get("deadline"), row.get("delay")
    if isinstance(deadline, str):
        return parse_deadline(deadline), None
    if isinstance(deadline, datetime):
        return deadline.replace(tzinfo=UTC) if deadline.tzinfo is None else deadline, None
    if deadline is None and isinstance(delay, int | float):
        return now + timedelta(seconds=delay), None
    raise ValueError("a row needs a deadline (ISO-8601) or a delay (seconds)")


def run_import(config: Settings, path: Path, out: TextIO | None = None) -> ImportResult:
    from confluent_kafka import KafkaError, Producer

    stream = out or sys.stderr
    real = Producer(
        {
            "bootstrap.servers": config.kafka_bootstrap_servers,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "enable.idempotence": True,
            **reveal_properties(config.kafka_properties),
            **reveal_properties(config.producer_properties),
        }
    )
    failures: list[KafkaError] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    started = last = time.monotonic()
    count = 0
    for number, row in enumerate(read_rows(path), 1):
        try:
            deadline, _ = _deadline(row, datetime.now(UTC))
            headers = [(str(k), v) for k, v in (row.get("headers") or {}).items()]
            kwargs: dict[str, Any] = {
                "value": row.get("value"),
                "key": row.get("key"),
                "deadline": deadline,
                "message_id": row.get("id"),
                "headers": headers,
                "topic": config.input_topic,
                "target_topic": row.get("topic"),
                "on_delivery": report,
            }
            while True:
                try:
                    client.schedule(real, **kwargs)
                    break
                except BufferError:  # the local queue is full: let the broker catch up
                    real.poll(0.05)
        except (ValueError, TypeError, AttributeError) as exc:
            raise ConfigError(f"{path}: row {number}: {exc}") from None
        count += 1
        if time.monotonic() - last >= 1.0:
            last = time.monotonic()
            real.poll(0)
            _progress(stream, count, last - started)
    remaining = real.flush(60)
    seconds = time.monotonic() - started
    _progress(stream, count, seconds, end="\n")
    if failures or remaining:
        raise ChronosError(
            f"{len(failures) + remaining} of {count} records not delivered: {failures[:1]}"
        )
    return ImportResult(count, seconds)


def _progress(out: TextIO, rows: int, seconds: float, end: str = "\r") -> None:
    rate = rows / seconds if seconds > 0 else 0.0
    out.write(f"imported {rows:,} rows in {seconds:.1f} s ({rate:,.0f} rows/s){end}")
    out.flush()
