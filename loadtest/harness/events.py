"""The files of a results directory: the event logs (Parquet), the background writer that
produces them, and the recorder's window as ``run.json`` holds it (``drain``)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

SENT_FILE = "sent.parquet"
RECEIVED_FILE = "received.parquet"
PRODUCE_ERRORS_FILE = "produce_errors.parquet"
RUN_FILE = "run.json"
FOLLOWUPS_FILE = "followups.parquet"  # the soak mix's cancels and reschedules

# One row per message handed to the producer.
SENT_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("key", pa.string()),  # null when the run uses null keys
        pa.field("deadline_ms", pa.int64(), nullable=False),  # epoch ms
        pa.field("sent_ms", pa.int64(), nullable=False),  # wall clock when produce() was called
        pa.field("payload_bytes", pa.int32(), nullable=False),
        pa.field("slot_ms", pa.int64(), nullable=False),  # when the open-loop schedule wanted it
        pa.field("tenant", pa.string()),  # a multi-tenant load's tenant; null otherwise
    ]
)

# One row per record of this run seen on the output or the dead-letter topic (copies included).
RECEIVED_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("deadline_ms", pa.int64(), nullable=False),  # from the loadtestDeadlineMs header
        pa.field("publish_ms", pa.int64(), nullable=False),  # record timestamp (fire time)
        pa.field("receive_ms", pa.int64(), nullable=False),  # wall clock when consumed
        pa.field("is_dead_letter", pa.bool_(), nullable=False),
        pa.field("dead_letter_reason", pa.string()),
        pa.field("tenant", pa.string()),  # from the loadtestTenant header; null without one
    ]
)

# Messages whose delivery to the input topic failed (absent when there were none).
FOLLOWUPS_SCHEMA = pa.schema(
    [
        pa.field("message_id", pa.string(), nullable=False),  # chronosMessageId
        pa.field("never_id", pa.string(), nullable=False),  # the schedule it cancels or replaces
        pa.field("fire_id", pa.string()),  # a reschedule's fire; null for a cancel
    ]
)

PRODUCE_ERRORS_SCHEMA = pa.schema(
    [pa.field("id", pa.string(), nullable=False), pa.field("error", pa.string(), nullable=False)]
)

BatchThunk = Callable[[], pa.RecordBatch]


class ParquetSink:
    """Writes record batches to one Parquet file from a background thread.

    Callers hand over a thunk that builds the batch, so the (GIL-releasing) conversion and
    compression happen off the hot path. ``close()`` writes an empty file when nothing arrived.
    """

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        self.path = path
        self.schema = schema
        self.rows = 0
        self.error: BaseException | None = None
        self._queue: queue.Queue[BatchThunk | None] = queue.Queue()
        self._writer = pq.ParquetWriter(str(path), schema, compression="zstd")
        self._thread = threading.Thread(target=self._run, name=f"sink-{path.name}", daemon=True)
        self._thread.start()

    def put(self, thunk: BatchThunk) -> None:
        self._queue.put(thunk)

    def _run(self) -> None:
        while True:
            thunk = self._queue.get()
            if thunk is None:
                return
            if self.error is not None:
                continue
            try:
                batch = thunk()
                if batch.num_rows:
                    self._writer.write_batch(batch)
                    self.rows += batch.num_rows
            except BaseException as exc:  # noqa: BLE001 - raised again by close()
                self.error = exc

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self._writer.close()
        if self.error is not None:
            raise RuntimeError(f"writing {self.path} failed: {self.error}") from self.error


@dataclass(frozen=True, slots=True)
class DrainWindow:
    """When the recorder stopped, as written to ``run.json`` (``drain``), epoch ms."""

    window_end_ms: int | None  # last deadline + drain timeout
    grace_end_ms: int | None  # window end + grace: the recorder never reads past it
    grace_s: float
    ended_ms: int  # when the recorder stopped (earlier than grace_end_ms once all arrived)
    received_at_window_end: int | None  # distinct ids seen when the window ended (None: before)
    received_at_end: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> DrainWindow | None:
        if not data:
            return None
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
