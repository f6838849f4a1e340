"""The store contract: the enqueue's fence while input partitions move between shards
(``chronos shards move``). With ``fenced`` (several shards), a message of a partition this shard
does not take now (moved to another shard, or being moved, even here) comes back MOVING and is
not applied at all; the others are applied as ever.
Unfenced (one database), every message is applied."""

from __future__ import annotations

from datetime import timedelta

from chronos.protocol import Action, ScheduledMessage
from chronos.store import Outcome
from chronos.store.moves import MOVED, MOVING, PartitionMove
from tests.support.store_contract.common import FAR, Harness, msg

MOVES = [
    PartitionMove(3, 0, MOVED, 2),  # moved away from this shard (1)
    PartitionMove(5, 1, MOVED, 2),  # moved here
    PartitionMove(7, 1, MOVING, 3),  # moving here: not yet
]


class MovesContract:
    def test_a_fenced_enqueue_applies_only_the_partitions_this_shard_takes(
        self, harness: Harness
    ) -> None:
        harness.record_moves(1, MOVES)  # type: ignore[attr-defined]
        store = harness.store
        assert sorted(store.partition_moves()) == MOVES
        due = harness.now() + timedelta(milliseconds=FAR)
        batch = [msg(f"m{p}", due) for p in (1, 3, 5, 7)]
        assert store.enqueue(batch, 0, partitions=[1, 3, 5, 7], fenced=True) == [
            Outcome.INSERTED,
            Outcome.MOVING,
            Outcome.INSERTED,
            Outcome.MOVING,
        ]
        assert store.get_message("m3") is None and store.get_message("m7") is None
        # A moving partition's cancel is not applied either: its message stays where it is.
        cancel = ScheduledMessage("m1", due, b"k", None, [], Action.CANCEL)
        assert store.enqueue([cancel], 0, partitions=[7], fenced=True) == [Outcome.MOVING]
        assert store.get_message("m1") is not None
        # Unfenced (one database): applied whatever the moves say.
        assert store.enqueue([msg("u3", due)], 0, partitions=[3]) == [Outcome.INSERTED]
