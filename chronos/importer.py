"""``chronos import FILE``: schedule every row of a JSON Lines or Parquet file through the client.

Each row has ``id`` (optional, see below), ``deadline`` (ISO-8601, or a datetime in Parquet) or
``delay`` (seconds from now), ``key`` and ``value`` (text as UTF-8, or bytes in Parquet; null
kept), ``headers`` (an object of name -> text, or a Parquet map; optional), and optionally
``topic`` (chronosTopic). Records are produced as fast as the broker takes them (the producer
batches; a full local queue is drained, not dropped), and the command waits for every delivery
report. A progress line goes to stderr. Parquet needs pyarrow (in the dev set, not in the slim
one `make dev` installs).

Re-running a file never schedules a row twice while its message waits: a row without an ``id``
gets a stable one, ``<file name>#<row number>`` (the file name cut to 100 characters), so the
second run's records are ignored as duplicates of the first's. A malformed row stops the import
at that row: what was produced before it is flushed, the error names the row (and its line in
a JSON Lines file) and how many records were delivered, and the exit status is 1 — fix the row
and run the file again.
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
from chronos.config.settings import Settings
from chronos.errors import ChronosError, ConfigError
from chronos.protocol import parse_deadline


class ImportRowError(ChronosError):
    """A row of the file cannot be scheduled; the message names it."""


@dataclass(frozen=True, slots=True)
class ImportResult:
    rows: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Row:
    number: int  # 1-based, over the rows (blank lines are not rows)
    where: str  # "row N" or "row N (line L)"
    fields: Mapping[str, Any] | None  # None: the row cannot be read (``problem`` says why)
    problem: str = ""


def read_rows(path: Path) -> Iterator[Row]:
    """The rows of a ``.parquet`` file (with pyarrow) or of a JSON Lines file (anything else)."""
    if path.suffix.lower() in (".parquet", ".pq"):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError(
                f"{path}: reading Parquet needs pyarrow (pip install pyarrow, or `make test`'s "
                "dev set); JSON Lines needs nothing"
            ) from None
        number = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=10_000):
            for fields in batch.to_pylist():
                number += 1
                yield Row(number, f"row {number}", fields)
        return
    number = 0
    with path.open("rb") as lines:
        for line_number, raw in enumerate(lines, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                number += 1
                where = f"row {number} (line {line_number})"
                yield Row(number, where, None, f"not UTF-8 (byte {exc.start + 1} of the line)")
                continue
            if not line.strip():
                continue
            number += 1
            where = f"row {number} (line {line_number})"
            try:
                fields = json.loads(line)
            except ValueError as exc:
                yield Row(number, where, None, f"not JSON: {exc}")
                continue
            if not isinstance(fields, dict):
                yield Row(number, where, None, "not a JSON object")
                continue
            yield Row(number, where, fields)


def stable_id(path: Path, number: int) -> str:
    """The id of row ``number`` of ``path`` when the row names none: the same on every run."""
    return f"{path.name[:100]}#{number}"


def _deadline(row: Mapping[str, Any], now: datetime) -> datetime:
    deadline, delay = row.get("deadline"), row.get("delay")
    if isinstance(deadline, str):
        return parse_deadline(deadline)
    if isinstance(deadline, datetime):
        return deadline.replace(tzinfo=UTC) if deadline.tzinfo is None else deadline
    if deadline is None and isinstance(delay, int | float) and not isinstance(delay, bool):
        return now + timedelta(seconds=delay)
    raise ValueError("a row needs a deadline (ISO-8601) or a delay (seconds)")


def _headers(raw: object) -> list[tuple[str, Any]]:
    """An object of name -> value, or a Parquet map (a list of (name, value) pairs)."""
    if raw is None:
        return []
    if isinstance(raw, Mapping):
        return [(str(k), v) for k, v in raw.items()]
    if isinstance(raw, list) and all(isinstance(p, tuple | list) and len(p) == 2 for p in raw):
        return [(str(k), v) for k, v in raw]
    raise ValueError(
        f"headers must be an object of name -> value (or a Parquet map), not {type(raw).__name__}"
    )


def run_import(config: Settings, path: Path, out: TextIO | None = None) -> ImportResult:
    from confluent_kafka import KafkaError, Producer

    from chronos.kafka import import_producer_config

    stream = out or sys.stderr
    real = Producer(import_producer_config(config))
    failures: list[KafkaError] = []
    delivered = [0]

    def report(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failures.append(err)
        else:
            delivered[0] += 1

    started = last = time.monotonic()
    count = 0
    for row in read_rows(path):
        try:
            if row.fields is None:
                raise ValueError(row.problem)
            kwargs: dict[str, Any] = {
                "value": row.fields.get("value"),
                "key": row.fields.get("key"),
                "deadline": _deadline(row.fields, datetime.now(UTC)),
                "message_id": row.fields.get("id") or stable_id(path, row.number),
                "headers": _headers(row.fields.get("headers")),
                "topic": config.input_topic,
                "target_topic": row.fields.get("topic"),
                "on_delivery": report,
            }
            while True:
                try:
                    client.schedule(real, **kwargs)
                    break
                except BufferError:  # the local queue is full: let the broker catch up
                    real.poll(0.05)
        except (ValueError, TypeError, AttributeError) as exc:
            real.flush(60)  # what was produced before the bad row is delivered, not dropped
            _progress(stream, count, time.monotonic() - started, end="\n")
            raise ImportRowError(
                f"{path}: {row.where}: {exc}; the {delivered[0]:,} records before it were "
                f"delivered ({len(failures)} failed): fix the row and run the file again (rows "
                "already scheduled are not scheduled twice while they wait)"
            ) from None
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
