"""``chronos import``: 100,000 JSON Lines rows and a Parquet file, produced to the real broker."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import cast

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from chronos import cli
from chronos.protocol import MESSAGE_ID_HEADER
from tests.support import Topics, consumer_config

pytestmark = pytest.mark.integration

ROWS = 100_000


def ids_on(bootstrap: str, topic: str, partitions: int, count: int, timeout: float) -> list[str]:
    consumer = Consumer({**consumer_config(bootstrap), "enable.partition.eof": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    ids: list[str] = []
    limit = time.monotonic() + timeout
    try:
        while len(ids) < count and time.monotonic() < limit:
            for m in consumer.consume(10_000, timeout=0.5):
                if m.error() is None:
                    headers = dict(cast(list[tuple[str, bytes | None]], m.headers() or []))
                    ids.append((headers[MESSAGE_ID_HEADER] or b"").decode())
    finally:
        consumer.close()
    return ids


def test_import_of_100000_json_lines_rows(
    tmp_path: Path, kafka_bootstrap: str, topics: Topics, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rows.jsonl"
    with path.open("w") as f:
        for i in range(ROWS):
            row = {"id": f"m{i}", "delay": 3600, "key": f"k{i % 100}", "value": f"v{i}"}
            if i % 2:
                row = {
                    "id": f"m{i}",
                    "deadline": "2099-01-01T00:00:00.000Z",
                    "value": None,
                    "headers": {"h": "x"},
                }
            f.write(json.dumps(row) + "\n")
    started = time.monotonic()
    code = cli.main(
        [
            "import",
            str(path),
            "--kafka-bootstrap-servers",
            kafka_bootstrap,
            "--input-topic",
            topics.input,
        ]
    )
    seconds = time.monotonic() - started
    assert code == 0
    captured = capsys.readouterr()
    assert f"imported {ROWS} rows" in captured.out
    assert f"imported {ROWS:,} rows" in captured.err  # the progress line
    print(f"chronos import: {ROWS} rows in {seconds:.1f} s ({ROWS / seconds:,.0f} rows/s)")
    ids = ids_on(kafka_bootstrap, topics.input, topics.partitions, ROWS, timeout=120)
    assert len(ids) == ROWS and set(ids) == {f"m{i}" for i in range(ROWS)}


def test_import_of_parquet(tmp_path: Path, kafka_bootstrap: str, topics: Topics) -> None:
    import pyarrow as pa  # the dev lock has it: no skip
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    table = pa.table(
        {
            "id": ["p1", "p2"],
            "delay": [60.0, 120.0],
            "key": [b"\x00", None],
            "value": [b"\xff", b"v"],
        }
    )
    pq.write_table(table, path)
    assert (
        cli.main(
            [
                "import",
                str(path),
                "--kafka-bootstrap-servers",
                kafka_bootstrap,
                "--input-topic",
                topics.input,
            ]
        )
        == 0
    )
    assert sorted(ids_on(kafka_bootstrap, topics.input, topics.partitions, 2, 30)) == ["p1", "p2"]


def import_file(path: Path, bootstrap: str, topics: Topics) -> int:
    return cli.main(
        ["import", str(path), "--kafka-bootstrap-servers", bootstrap, "--input-topic", topics.input]
    )


def test_a_bad_row_stops_the_import_naming_it_after_delivering_the_rows_before(
    tmp_path: Path, kafka_bootstrap: str, topics: Topics, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "delay": 60}\n\n{"id": "b", "delay": 60}\n{"id": "c"}\n')
    assert import_file(path, kafka_bootstrap, topics) == 1
    err = capsys.readouterr().err
    assert "row 3 (line 4)" in err and "deadline" in err, err
    assert "the 2 records before it were delivered" in err, err
    assert "Traceback" not in err
    assert sorted(ids_on(kafka_bootstrap, topics.input, topics.partitions, 2, 30)) == ["a", "b"]


def test_a_line_that_is_not_utf8_is_named(
    tmp_path: Path, kafka_bootstrap: str, topics: Topics, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"id": "a", "delay": 60}\n{"id": "caf\xe9", "delay": 60}\n')
    assert import_file(path, kafka_bootstrap, topics) == 1
    err = capsys.readouterr().err
    assert "row 2 (line 2): not UTF-8" in err and "Traceback" not in err, err


def test_running_a_file_again_schedules_no_row_twice(
    tmp_path: Path, kafka_bootstrap: str, topics: Topics
) -> None:
    """Rows without an id get one derived from the file name and the row number: the second
    run's records carry the same ids, so Chronos ignores them while the first run's wait."""
    path = tmp_path / "no-ids.jsonl"
    path.write_text("".join(json.dumps({"delay": 3600, "value": f"v{i}"}) + "\n" for i in range(5)))
    assert import_file(path, kafka_bootstrap, topics) == 0
    assert import_file(path, kafka_bootstrap, topics) == 0
    ids = ids_on(kafka_bootstrap, topics.input, topics.partitions, 10, 30)
    assert sorted(ids) == sorted([f"no-ids.jsonl#{i}" for i in range(1, 6)] * 2)


def test_parquet_map_headers_are_accepted(
    tmp_path: Path, kafka_bootstrap: str, topics: Topics
) -> None:
    import pyarrow as pa  # the dev lock has it: no skip
    import pyarrow.parquet as pq

    path = tmp_path / "maps.parquet"
    headers = pa.array([[("h", "x")], []], type=pa.map_(pa.string(), pa.string()))
    pq.write_table(pa.table({"id": ["m1", "m2"], "delay": [60, 60], "headers": headers}), path)
    assert import_file(path, kafka_bootstrap, topics) == 0
    assert sorted(ids_on(kafka_bootstrap, topics.input, topics.partitions, 2, 30)) == ["m1", "m2"]
