"""The recorder's record handling, with stand-in messages (no broker needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from loadtest.harness import headers as h
from loadtest.harness.consumer import OutputRecorder


class FakeMessage:
    def __init__(self, topic: str, offset: int, headers: list[tuple[str, bytes]], ts: int) -> None:
        self._topic, self._offset, self._headers, self._ts = topic, offset, headers, ts

    def error(self) -> None:
        return None

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 1

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, self._ts)


def _tracking(run: str, seq: int, deadline: int) -> list[tuple[str, bytes]]:
    return [
        (h.RUN, run.encode()),
        (h.ID, f"{run}-{seq}".encode()),
        (h.DEADLINE_MS, str(deadline).encode()),
        ("app", b"kept"),
    ]


def test_records_filters_and_counts(tmp_path: Path) -> None:
    rec = OutputRecorder(
        bootstrap="127.0.0.1:1",
        output_topic="out",
        dead_letter_topic="dlq",
        run_id="r1",
        expected=5,
        out_dir=tmp_path,
    )
    messages: list[Any] = [
        FakeMessage("out", 10, _tracking("r1", 0, 1000), 1010),
        FakeMessage("out", 11, _tracking("r1", 1, 2000), 1990),
        FakeMessage("out", 12, _tracking("r1", 0, 1000), 1500),  # duplicate of r1-0
        FakeMessage("out", 13, _tracking("old", 0, 1000), 1000),  # another run: ignored
        FakeMessage("out", 14, [("app", b"x")], 1000),  # no tracking headers: ignored
        FakeMessage(
            "dlq", 3, [*_tracking("r1", 2, 3000), (h.DEAD_LETTER_REASON, b"bad deadline")], 5
        ),
        FakeMessage("out", 15, [*_tracking("r1", 3, 3000), (h.TENANT, b"small-03")], 3001),
    ]
    rec._record(messages, receive_ms=4242)
    s = rec.stats
    assert (s.output_records, s.dead_letter_records, s.foreign_records) == (4, 1, 2)
    assert s.distinct_ids == 4
    assert s.output_duplicates == 1
    assert sorted(rec.recent_lateness) == [-10, 1, 10, 500]
    rec.stop()
    table = pq.read_table(tmp_path / "received.parquet").to_pylist()
    assert [r["id"] for r in table] == ["r1-0", "r1-1", "r1-0", "r1-2", "r1-3"]
    assert [r["tenant"] for r in table] == [None, None, None, None, "small-03"]
    assert table[3]["is_dead_letter"] and table[3]["topic"] == "dlq"
    assert table[3]["dead_letter_reason"] == "bad deadline"
    assert table[0]["dead_letter_reason"] is None
    assert table[1] == {
        "id": "r1-1",
        "topic": "out",
        "partition": 1,
        "offset": 11,
        "deadline_ms": 2000,
        "publish_ms": 1990,
        "receive_ms": 4242,
        "is_dead_letter": False,
        "dead_letter_reason": None,
        "tenant": None,
    }
