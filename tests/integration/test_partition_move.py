"""Moving an input partition to another shard (``chronos shards move``,
chronos.store.postgres.moves) on real Postgres databases, two shards recorded by ``chronos
migrate``: the partition's waiting rows and the live cancel markers reach the new shard with
every column as it was, and leave the old one; a claimed row is waited for (the partition stays
held, and the command run again finishes); a message cancelled in the new shard while it moved
is not copied; each shard's enqueue fence refuses the partition while it moves, and afterwards
only its new shard takes it; a move waits for the enqueue statements under way."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from chronos import cli
from chronos.config.shards import ShardMap
from chronos.errors import ChronosError
from chronos.protocol import Action, ScheduledMessage
from chronos.store import Outcome, PostgresStore, migrate
from chronos.store.postgres import moves
from tests.support.databases import DatabaseFactory

pytestmark = pytest.mark.integration

NODE = "00000000-0000-0000-0000-000000000001"
LAYOUT = ShardMap(2)


@pytest.fixture
def shards(database_factory: DatabaseFactory) -> Iterator[list[str]]:
    """Two databases recorded as shards 0 and 1 of two (map ``mod``)."""
    urls = [database_factory.create_migrated() for _ in range(2)]
    for shard, url in enumerate(urls):
        migrate.record_shard(url, shard, LAYOUT)
    yield urls
    for url in urls:
        database_factory.drop(url)


def _message(message_id: str, in_s: float, action: Action = Action.SCHEDULE) -> ScheduledMessage:
    due = datetime.now(UTC) + timedelta(seconds=in_s)
    return ScheduledMessage(
        message_id, due, b"key-" + message_id.encode(), b"\x00v", [("h", b"1")], action, tenant="t"
    )


def _enqueue(
    store: PostgresStore, messages: list[ScheduledMessage], partition: int
) -> list[Outcome]:
    return store.enqueue(messages, 0, partitions=[partition] * len(messages), fenced=True)


def _rows(url: str, partition: int) -> dict[str, tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT * FROM chronos_messages WHERE input_partition = %s ORDER BY id", (partition,)
        ).fetchall()
    return {str(r[0]): tuple(r) for r in rows}


def _markers(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("SELECT id FROM chronos_cancels").fetchall()}


def test_a_move_takes_the_partitions_rows_and_markers_and_the_fences_follow(
    shards: list[str],
) -> None:
    stores = [PostgresStore(url, shard=i) for i, url in enumerate(shards)]
    try:
        assert (
            _enqueue(stores[1], [_message(f"p1-{i}", 600) for i in range(2500)], 1)
            == [Outcome.INSERTED] * 2500
        )
        assert _enqueue(stores[1], [_message("p3-0", 600)], 3) == [Outcome.INSERTED]
        # A cancel that arrived before its schedule: its marker must follow the partition.
        assert _enqueue(stores[1], [_message("early", 0, Action.CANCEL)], 1) == [
            Outcome.CANCEL_UNKNOWN
        ]
        claimed = _enqueue(stores[1], [_message("claimed", -1)], 1)
        assert claimed == [Outcome.INSERTED] or claimed == [Outcome.FIRE_NOW]
        stores[1].enqueue([_message("due", 0.2)], 0, partitions=[1])
        time.sleep(0.3)
        held = stores[1].claim(NODE, 0, 10, 4)
        assert [r.id for r in held] == ["due"]
        before = _rows(shards[1], 1)

        # The claimed row outlasts the wait: the partition stays held, and is still held by
        # both shards' fences.
        with pytest.raises(ChronosError, match="run the same command again"):
            moves.move_partition(shards, LAYOUT, 1, 0, wait_claimed_s=0.5)
        for store in stores:
            assert _enqueue(store, [_message("refused", 600)], 1) == [Outcome.MOVING]
        assert _enqueue(stores[1], [_message("p3-1", 600)], 3) == [Outcome.INSERTED]
        assert _rows(shards[1], 1).keys() == {"due"}  # the waiting rows are copied already

        stores[1].release(NODE, [(r.id, r.readied_at) for r in held], failed=True)
        report = moves.move_partition(shards, LAYOUT, 1, 0, batch=1000)
        assert report.copied == 1 and report.sources == [1]  # the rest went the first time

        assert _rows(shards[1], 1) == {}
        after = _rows(shards[0], 1)
        assert after.keys() == before.keys()
        for message_id, row in before.items():  # every column as it was, the claim's end aside
            if message_id != "due":
                assert after[message_id] == row
        assert "early" in _markers(shards[0])
        assert _enqueue(stores[0], [_message("early", 600)], 1) == [Outcome.BLOCKED]

        # Moved: shard 0 takes partition 1, shard 1 refuses it; partition 3 stays in shard 1.
        assert _enqueue(stores[1], [_message("late", 600)], 1) == [Outcome.MOVING]
        assert _enqueue(stores[0], [_message("p1-0", 0, Action.CANCEL)], 1) == [Outcome.CANCELLED]
        assert _enqueue(stores[1], [_message("p3-2", 600)], 3) == [Outcome.INSERTED]
        assert sorted(m.partition for m in stores[1].partition_moves()) == [1]
        assert moves.move_partition(shards, LAYOUT, 1, 0).copied == 0  # nothing left to move
    finally:
        for store in stores:
            store.close()


def test_a_message_cancelled_in_the_new_shard_while_it_moves_is_not_copied(
    shards: list[str],
) -> None:
    store = PostgresStore(shards[0], shard=0)
    try:
        _enqueue(store, [_message("kept", 600), _message("gone", 600)], 2)
        with psycopg.connect(shards[1], autocommit=True) as conn:  # an admin cancel's marker
            conn.execute(
                "INSERT INTO chronos_cancels (id, expires_at) VALUES ('gone', now() + '1 hour')"
            )
        report = moves.move_partition(shards, LAYOUT, 2, 1)
        assert (report.copied, report.cancelled) == (1, 1)
        assert _rows(shards[1], 2).keys() == {"kept"} and _rows(shards[0], 2) == {}
        with psycopg.connect(shards[1]) as conn:  # its fair claim knows the moved tenant now
            known = {r[0] for r in conn.execute("SELECT tenant FROM chronos_tenants")}
        assert "t" in known
    finally:
        store.close()


def test_a_move_waits_for_the_enqueue_statements_under_way(shards: list[str]) -> None:
    """An enqueue statement holds the moves' lock shared until its transaction ends: a move
    marks the partition moving only after it (its rows are then copied with the others)."""
    with psycopg.connect(shards[1]) as enqueuing:  # a transaction, as a statement's
        enqueuing.execute("SELECT chronos_partitions_refused()")
        done = threading.Event()

        def move() -> None:
            moves.move_partition(shards, LAYOUT, 1, 0)
            done.set()

        mover = threading.Thread(target=move)
        mover.start()
        assert not done.wait(1.0)  # waiting for the enqueue's transaction
        enqueuing.execute(
            "INSERT INTO chronos_messages (id, deadline, input_partition) "
            "VALUES ('in-flight', now() + '1 hour', 1)"
        )
        enqueuing.commit()
        mover.join(10)
    assert done.is_set()
    assert _rows(shards[0], 1).keys() == {"in-flight"} and _rows(shards[1], 1) == {}


def test_the_command_moves_and_shows_and_says_what_it_cannot_do(
    shards: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    both = " ".join(shards)
    assert cli.main(["shards", "move", "3", "--to", "0", "--database-url", both]) == 0
    assert "partition 3 moved to shard 0" in capsys.readouterr().out
    assert cli.main(["shards", "show", "--database-url", both]) == 0
    assert "partition 3: moved to shard 0" in capsys.readouterr().out
    assert cli.main(["shards", "move", "3", "--to", "2", "--database-url", both]) == 2
    assert "--to 2: the shards are 0 to 1" in capsys.readouterr().err
    assert cli.main(["shards", "move", "3", "--to", "0", "--database-url", shards[0]]) == 2
    assert "one database" in capsys.readouterr().err
    reversed_ = " ".join(reversed(shards))
    assert cli.main(["shards", "move", "4", "--to", "1", "--database-url", reversed_]) == 2
    assert "is recorded as shard 1 of 2" in capsys.readouterr().err


def _recorded(url: str) -> tuple[object, ...] | None:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT shard, shards, map FROM chronos_shard").fetchone()


def test_a_database_added_is_recorded_by_migrate_and_partitions_move_to_it(
    shards: list[str], database_factory: DatabaseFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    third = database_factory.create_migrated()
    try:
        store = PostgresStore(shards[1], shard=1)
        try:
            _enqueue(store, [_message(f"p1-{i}", 600) for i in range(20)], 1)
        finally:
            store.close()
        three = " ".join([*shards, third])
        # `mod` over three databases would move partitions away from their messages: refused.
        assert cli.main(["migrate", "--database-url", three]) == 2
        assert "is recorded as shard 0 of 2 (map mod)" in capsys.readouterr().err
        assert cli.main(["migrate", "--database-url", three, "--shard-map", "mod:2"]) == 0
        assert [_recorded(url) for url in (*shards, third)] == [
            (0, 3, "mod:2"),
            (1, 3, "mod:2"),
            (2, 3, "mod:2"),
        ]
        assert cli.main(["migrate", "--database-url", " ".join(shards)]) == 2  # no going back
        capsys.readouterr()
        move = ["shards", "move", "1", "--to", "2", "--database-url", three]
        assert cli.main([*move, "--shard-map", "mod:2"]) == 0
        assert "20 messages copied" in capsys.readouterr().out
        assert len(_rows(third, 1)) == 20 and _rows(shards[1], 1) == {}
    finally:
        database_factory.drop(third)


def test_a_message_without_its_partition_stops_the_move_before_it_starts(
    shards: list[str],
) -> None:
    """A row written without its input partition (an earlier release's) could be the
    partition's: the move refuses to hold the partition, and marks nothing."""
    with psycopg.connect(shards[0], autocommit=True) as conn:
        conn.execute("INSERT INTO chronos_messages (id, deadline) VALUES ('old', now() + '1 hour')")
    with pytest.raises(ChronosError, match=r"1 message.*without their input partition"):
        moves.move_partition(shards, LAYOUT, 2, 1)
    assert [_moves(url) for url in shards] == [[], []]


def _moves(url: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT partition, state FROM chronos_partition_moves").fetchall()
