"""The Store contract against PostgresStore on the real Postgres (``harness``: conftest.py), and
every named query PREPAREd."""

from __future__ import annotations

import re
import threading
from datetime import timedelta, timezone
from typing import cast

import psycopg
import pytest
from confluent_kafka import Consumer
from psycopg import sql

from chronos.errors import StoreError
from chronos.intake.loop import IntakeLoop
from chronos.protocol import Headers, ScheduledMessage, encode_headers
from chronos.store import Outcome, PostgresStore
from chronos.store.postgres.sql import queries
from chronos.testing import FakeConsumer, FakePublisher, make_record
from tests.support import Topics, make_settings
from tests.support.kafka import chronos_headers
from tests.support.store_contract import (
    HORIZON,
    ActionContract,
    StoreContract,
    TenantContract,
    msg,
    node,
)
from tests.support.store_contract.history import HistoryContract

pytestmark = pytest.mark.integration


class TestPostgresStore(StoreContract, ActionContract, TenantContract):
    pass


class TestPostgresHistory(HistoryContract):
    pass


# ---------------------------------------------------------------------------- named queries


def _prepared_form(text: str) -> tuple[str, int]:
    """``%(name)s`` placeholders as ``$n`` (one number per name), and how many there are."""
    numbers: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${numbers.setdefault(match[1], len(numbers) + 1)}"

    return re.sub(r"%\((\w+)\)[sb]", number, text), len(numbers)


@pytest.mark.parametrize("name", sorted(queries()))
def test_every_named_query_parses_and_plans(name: str, migrated_database_url: str) -> None:
    text = queries()[name].strip().rstrip(";")
    statement, _ = _prepared_form(text)
    with psycopg.connect(migrated_database_url, autocommit=True) as conn:
        body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
        if body.lstrip().upper().startswith("VACUUM"):  # cannot be prepared: it runs instead
            conn.execute(body, prepare=False)
            return
        # The statement is the trusted text of the named SQL; only the name is composed.
        prepare = sql.SQL("PREPARE {} AS ").format(sql.Identifier(f"check_{name}"))
        conn.execute(prepare + sql.SQL(statement))
        (count,) = conn.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE name = %s", (f"check_{name}",)
        ).fetchone() or (0,)
        assert count == 1


# ---------------------------------------------------------------------------- Postgres only


def test_deadlines_are_stored_as_instants_whatever_the_offset(migrated_database_url: str) -> None:
    store = PostgresStore(migrated_database_url)
    try:
        base = store.ping() + timedelta(minutes=10)
        offsets = [timedelta(0), timedelta(hours=2), timedelta(hours=-5, minutes=-30)]
        messages = [
            ScheduledMessage(f"o{i}", base.astimezone(timezone(off)), None, None, [])
            for i, off in enumerate(offsets)
        ]
        assert store.enqueue(messages, 0) == [Outcome.INSERTED] * 3
        for i in range(3):
            stored = store.get_message(f"o{i}")
            assert stored is not None
            assert stored.deadline == base
    finally:
        store.close()


def test_a_large_value_round_trips(migrated_database_url: str) -> None:
    store = PostgresStore(migrated_database_url)
    try:
        value = bytes(range(256)) * 4096  # 1 MiB of every byte value
        store.enqueue([msg("big", store.ping() + timedelta(milliseconds=300), value=value)], 0)
        (row,) = store.claim(node(), HORIZON, 1, 5)
        assert row.value == value
    finally:
        store.close()


ROLLING_UPGRADE_HEADERS: Headers = [
    ("long", bytes(range(256)) * 2),  # Postgres's own base64 breaks lines every 76 characters
    ("dup", None),
    ("dup", b""),
    ('"é\\n', b"\xff\x00\xfe"),
]


def test_stored_headers_are_the_document_every_release_reads_and_writes(
    migrated_database_url: str,
) -> None:
    """Pods of two releases share the table during a rolling upgrade: the enqueue statement
    stores exactly the header document the previous release wrote (``encode_headers``: base64
    without line breaks), and the claim reads a row written in that form byte-exact."""
    store = PostgresStore(migrated_database_url)
    try:
        soon = store.ping() + timedelta(milliseconds=300)
        store.enqueue([msg("new-writer", soon, headers=ROLLING_UPGRADE_HEADERS)], 0)
        expected = encode_headers(ROLLING_UPGRADE_HEADERS)
        assert expected is not None
        with psycopg.connect(migrated_database_url, autocommit=True) as conn:
            stored = conn.execute(
                "SELECT message_headers::text = %s::jsonb::text, message_headers::text"
                " FROM chronos_messages WHERE id = 'new-writer'",
                (expected,),
            ).fetchone()
            assert stored is not None and stored[0], stored
            conn.execute(
                "INSERT INTO chronos_messages (id, deadline, message_key, message_value,"
                " message_headers) VALUES ('old-writer', %s, NULL, %s, %s::jsonb)",
                (soon, b"\x00v", expected),
            )
        rows = {r.id: r for r in store.claim(node(), HORIZON, 10, 5)}
        assert rows["old-writer"].headers == ROLLING_UPGRADE_HEADERS
        assert rows["old-writer"].value == b"\x00v" and rows["old-writer"].key is None
        assert rows["new-writer"].headers == ROLLING_UPGRADE_HEADERS
    finally:
        store.close()


def test_driver_errors_become_store_errors() -> None:
    store = PostgresStore("postgresql://nobody@127.0.0.1:1/none", connect_timeout=1)
    with pytest.raises(StoreError):
        store.ping()


def test_a_lost_connection_is_replaced(migrated_database_url: str) -> None:
    store = PostgresStore(migrated_database_url, application_name="chronos-reconnect")
    try:
        store.ping()
        with psycopg.connect(migrated_database_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'chronos-reconnect'"
            )
        with pytest.raises(StoreError):
            store.ping()  # the statement on the dead connection fails...
        assert store.ping()  # ...and the next one reconnects
    finally:
        store.close()


def test_a_consumed_batch_of_large_messages_is_stored_without_stalling_intake(
    migrated_database_url: str,
) -> None:
    """Kafka records go up to 1 MB by default and a consumed batch holds up to
    consume_batch_size of them: ~200 MB of values in one batch (beyond what one JSON document
    may hold in Postgres) must still be stored, not retried unchanged for ever."""
    store = PostgresStore(migrated_database_url)
    consumer = FakeConsumer()
    loop = IntakeLoop(
        make_settings(migrated_database_url, "127.0.0.1:1", Topics("in", "out", "dlq")),
        store,
        FakePublisher(),
        lambda **_: cast(Consumer, consumer),
    )
    try:
        later = store.ping() + timedelta(minutes=10)
        value = b"\xab" * 900_000  # just under the default 1 MB record limit
        records = [
            make_record("in", 0, i, b"k", value, chronos_headers(f"large-{i}", later))
            for i in range(230)  # ~207 MB
        ]
        done: list[bool] = []
        worker = threading.Thread(
            target=lambda: done.append(loop.process_batch(cast(Consumer, consumer), records))
        )
        worker.start()
        worker.join(30)  # storing ~200 MB takes a few seconds here
        if worker.is_alive():
            loop.stop()
            worker.join(30)
        assert done == [True], "the batch was not stored"
        assert consumer.stored == {("in", 0): 230}
        assert store.get_message("large-229") is not None
    finally:
        store.close()
