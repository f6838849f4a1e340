"""The enqueue statement's arrays, encoded by Chronos in Postgres's binary format, read back by a
real Postgres as the values they were made of; and a batch larger than one statement's budget
split into several, every outcome in its place."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from chronos.errors import StoreError
from chronos.protocol import ScheduledMessage
from chronos.store import PostgresStore
from chronos.store.arrays import bytea_array, int4_array, text_array, timestamptz_array
from chronos.store.batch import encode_batch
from chronos.store.postgres import store as store_module
from chronos.store.types import Outcome

pytestmark = pytest.mark.integration

INSTANT = datetime(2026, 11, 26, 7, 45, 12, 345678, tzinfo=UTC)


@pytest.mark.parametrize(
    ("encode", "cast", "values"),
    [
        (text_array, "text[]", ["a", "", "é→✓ 漢字", None, "x" * 70_000]),
        (text_array, "text[]", []),
        (text_array, "text[]", [None, None]),
        (bytea_array, "bytea[]", [b"", b"\x00\xff\x80", None, bytes(range(256)) * 300]),
        (bytea_array, "bytea[]", []),
        (int4_array, "int4[]", [0, 1, -1, 2**31 - 1, -(2**31), None]),
        (int4_array, "int4[]", []),
        (
            timestamptz_array,
            "timestamptz[]",
            [
                INSTANT,
                None,
                datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                INSTANT.astimezone(__import__("zoneinfo").ZoneInfo("America/New_York")),
                INSTANT + timedelta(days=3650),
            ],
        ),
    ],
)
def test_an_encoded_array_reads_back_as_its_values(
    database_url: str, encode: Any, cast: str, values: list[Any]
) -> None:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            f"SELECT %(a)b::{cast}, cardinality(%(a)b::{cast})",  # cast: a literal of this test
            {"a": encode(values)},
        ).fetchone()
    assert row is not None
    assert row == (values, len(values))


def test_a_batch_over_the_statement_budget_is_split_and_every_outcome_kept(
    migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(migrated_database_url)
    try:
        due = store.ping() + timedelta(hours=1)
        batch = [
            ScheduledMessage(f"m{i}", due, b"k", b"v" * 1000, [("h", b"x" * 100)])
            for i in range(50)
        ]
        store.enqueue(batch[10:20], 0)  # these ten are duplicates in the split batch
        monkeypatch.setattr(store_module, "ENQUEUE_CHUNK_BYTES", 8_000)  # about 6 per statement
        encoded: list[int] = []

        def counted(
            messages: list[ScheduledMessage], partitions: list[int | None] | None = None
        ) -> dict[str, Any]:
            encoded.append(len(messages))
            return encode_batch(messages, partitions)

        monkeypatch.setattr(store_module, "encode_batch", counted)
        outcomes = store.enqueue(batch, 0, partitions=[i % 7 for i in range(50)])
        assert encoded[0] == 50 and len(encoded) > 5 and sum(encoded[1:]) == 50, encoded
        assert outcomes[:10] == [Outcome.INSERTED] * 10
        assert outcomes[10:20] == [Outcome.DUPLICATE] * 10
        assert outcomes[20:] == [Outcome.INSERTED] * 30
        with psycopg.connect(migrated_database_url) as conn:
            count = conn.execute("SELECT count(*) FROM chronos_messages").fetchone()
            headers = conn.execute(
                "SELECT message_headers FROM chronos_messages WHERE id = 'm49'"
            ).fetchone()
            partitions = conn.execute(
                "SELECT id, input_partition FROM chronos_messages WHERE id NOT IN "
                "('m10','m11','m12','m13','m14','m15','m16','m17','m18','m19')"
            ).fetchall()
        assert count == (50,)
        assert sorted(partitions) == sorted((f"m{i}", i % 7) for i in (*range(10), *range(20, 50)))
        assert headers == ([{"h": "eHh4" * 33 + "eA=="}],)
    finally:
        store.close()


def test_a_value_no_column_holds_is_refused_like_data_postgres_refuses(
    migrated_database_url: str,
) -> None:
    """An integer beyond its column, caught while encoding: a refusal of the data (not
    retryable), so intake isolates the message and dead-letters it, as it does when Postgres
    refuses a value; never an exception that stops intake."""
    store = PostgresStore(migrated_database_url)
    try:
        due = store.ping() + timedelta(hours=1)
        bad = ScheduledMessage("too-long", due, None, b"v", [], expires_ms=2**31)
        with pytest.raises(StoreError) as refused:
            store.enqueue([ScheduledMessage("fine", due, None, b"v", []), bad], 0)
        assert not refused.value.retryable
        assert store.enqueue([ScheduledMessage("fine", due, None, b"v", [])], 0) == [
            Outcome.INSERTED
        ]
    finally:
        store.close()
