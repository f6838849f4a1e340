"""Intake over several shards (docs/shards.md): each message goes to its input partition's shard,
and a shard whose database is away holds back its own partitions only.

A batch's messages are enqueued shard by shard, one statement each (``route``, on the enqueue
statement's thread). With one shard, an outage is waited out as ever (retried with back-off).
With several, a shard found away (its statement failed for want of the database) is given up on
for the batch: its messages are **deferred**, not stored, while the other shards' are. The loop
then (``hold``, on the consumer's thread) pauses every assigned partition of that shard,
remembers for each where to read it again (the first offset of the batch's records from it, or
the consumer's position), and strips those partitions from the offsets of every batch it settles
while they are held: no offset past a deferred record is ever stored, so nothing is lost even if
the node dies meanwhile (the partitions' next owner reads them from the last commit). A probe
(``tick``: a ping of the shard every second, on a thread of its own) finds the database back;
the held partitions are then sought back to where they must be read again and resumed. Records
read twice are enqueued twice: the second is a duplicate of its id, as any replay.

A partition being moved to another shard (``chronos shards move``) is held the same way, from
its first record that a shard refused (the enqueue statement's fence) or as soon as the moves
read every second (``tick``, from every shard that answers) say so; it is read again once they
say it has moved, its messages going to its new shard from then on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from chronos.config.shards import ShardMap
from chronos.errors import StoreError
from chronos.protocol import ScheduledMessage
from chronos.store import Outcome, Store
from chronos.store.moves import MOVED, MOVING, PartitionMove, merge

log = logging.getLogger("chronos.intake.loop")  # the intake loop's logger: one name for intake

PROBE_INTERVAL_S = 1.0
MOVES_REFRESH_S = 1.0  # how often the moves are read


class ShardAway(Exception):
    """A shard's statement failed because its database could not be reached."""


class Deferred:
    """The outcome of a message whose shard was away: not stored; its partition is read again."""

    def __repr__(self) -> str:
        return "DEFERRED"


DEFERRED = Deferred()

Enqueue = Callable[[list[ScheduledMessage], Store, bool, list[int]], list[Outcome | str] | None]


class ShardRouter:
    def __init__(
        self,
        stores: Sequence[Store],
        shard_map: ShardMap,
        topic: str,
        on_seek: Callable[[Iterable[tuple[str, int]]], None] = lambda _: None,
    ) -> None:
        self.stores = list(stores)
        self.shard_map = shard_map
        self.topic = topic
        self.on_seek = on_seek  # a partition sought back: what intake remembers of it goes
        self.away: set[int] = set()  # shards whose database was away at their last statement
        self.held: dict[int, int] = {}  # input partition -> the offset to read it again from
        self.paused: set[int] = set()  # held partitions paused while their shard is away
        self.batches = 0  # the batches consumed so far (``next_batch``)
        self.sought: dict[int, int] = {}  # held partition -> the batches consumed before its seek
        self._probes = ThreadPoolExecutor(1, thread_name_prefix="chronos-shard-probe")
        self._probe: tuple[int, Future[Any]] | None = None
        self._probed_at = 0.0
        self._probed_last = -1
        self.moves: dict[int, PartitionMove] = {}  # the partitions moved away from the map
        self.unmapped: set[int] = set()  # partitions with no shard this node knows (held; said)
        self._refresh: Future[dict[int, PartitionMove]] | None = None
        self._refreshed_at = 0.0

    def next_batch(self) -> int:
        """Number a batch as it is consumed: one consumed after a partition's seek reads it from
        where it was sought back to."""
        self.batches += 1
        return self.batches

    @property
    def several(self) -> bool:
        return len(self.stores) > 1

    def shard_of(self, partition: int) -> int | None:
        """The shard that takes ``partition``'s messages now; None while it moves (or moved to
        a shard this node was not given: its settings predate the shard)."""
        move = self.moves.get(partition)
        if move is not None:
            if move.state != MOVED:
                return None
            if move.shard >= len(self.stores) and partition not in self.unmapped:
                self.unmapped.add(partition)
                log.error(
                    "input partition %d moved to shard %d, which CHRONOS_DATABASE_URL does not "
                    "name (%d databases): it is held until this node restarts with it",
                    partition,
                    move.shard,
                    len(self.stores),
                    extra={"event": "partition_unmapped", "partition": partition},
                )
            return move.shard if move.shard < len(self.stores) else None
        try:
            return self.shard_map.shard_of(partition)
        except KeyError:  # a partition added since the node started, not in an explicit map
            if partition not in self.unmapped:
                self.unmapped.add(partition)
                log.error(
                    "input partition %d has no shard in CHRONOS_SHARD_MAP (%s): it is held "
                    "(nothing of it stored, no offset of it committed) until the map names it "
                    "and the nodes restart with it",
                    partition,
                    self.shard_map.spec,
                    extra={"event": "partition_unmapped", "partition": partition},
                )
            return None

    def _blocked(self, partition: int) -> bool:
        shard = self.shard_of(partition)
        return shard is None or shard in self.away

    def route(
        self, messages: list[ScheduledMessage], partitions: list[int], enqueue: Enqueue
    ) -> list[Outcome | str | Deferred] | None:
        """Enqueue each message in its partition's shard (several shards): ``enqueue(messages,
        store, patient=False)`` raises ShardAway for a database that cannot be reached, whose
        messages are then deferred. None if stopping."""
        by_shard: dict[int, list[int]] = {}
        for index, partition in enumerate(partitions):
            shard = self.shard_of(partition)
            if shard is not None:  # None: moving, deferred until it has moved
                by_shard.setdefault(shard, []).append(index)
        outcomes: list[Outcome | str | Deferred] = [DEFERRED] * len(messages)
        for shard, indexes in sorted(by_shard.items()):
            if shard in self.away:
                continue  # deferred until its database answers again
            mine = [partitions[i] for i in indexes]
            try:
                got = enqueue([messages[i] for i in indexes], self.stores[shard], False, mine)
            except ShardAway as exc:
                self.away.add(shard)
                log.warning(
                    "shard %d's database is away (%s): its partitions are held until it "
                    "answers; the other shards' go on",
                    shard,
                    exc,
                    extra={"event": "shard_away", "shard": shard},
                )
                continue
            if got is None:
                return None
            for index, outcome in zip(indexes, got, strict=True):
                if outcome is Outcome.MOVING:  # the shard's fence: the partition is moving
                    self._refused(partitions[index], shard)
                else:
                    outcomes[index] = outcome
        return outcomes

    def _refused(self, partition: int, shard: int) -> None:
        """Shard ``shard`` no longer takes ``partition`` (a move the moves read had not shown
        yet): held as moving until they show where it went."""
        if partition not in self.moves or self.moves[partition].state != MOVING:
            log.warning(
                "partition %d is being moved away from shard %d: held until it has moved",
                partition,
                shard,
                extra={"event": "partition_moving", "partition": partition},
            )
        self.moves[partition] = PartitionMove(partition, -1, MOVING, -1)
        self._refreshed_at = 0.0  # read the moves again at once

    def hold(
        self,
        consumer: Consumer | None,
        batch: int,
        firsts: dict[tuple[str, int], int],
        offsets: dict[tuple[str, int], int],
        deferred: set[int],
        assigned: set[tuple[str, int]],
    ) -> None:
        """After batch number ``batch``, whose messages of the input partitions ``deferred`` were
        not stored: hold each of those partitions (where to read it again: its first record in
        the batch) and every assigned partition of the shards away (else: the consumer's
        position); pause the ones of a shard still away, seek back the others (their shard came
        back while the batch was under way). A partition is released by the first batch consumed
        after its seek that stores it (it reads it from there); until then its offsets are
        stripped from every batch's."""
        for partition in sorted(deferred):
            first = firsts[(self.topic, partition)]
            self.held[partition] = min(self.held.get(partition, first), first)
            if not self._blocked(partition):
                self._seek(consumer, [partition])
        newly = []
        mine = {p for t, p in assigned if t == self.topic} | deferred
        for partition in sorted(mine):
            if not self._blocked(partition):
                continue
            if partition not in self.held and consumer is not None:
                (pos,) = consumer.position([TopicPartition(self.topic, partition)])
                if pos.offset < 0:
                    continue  # nothing read from it yet: the last commit is where it starts
                self.held[partition] = pos.offset
            if partition in self.held and partition not in self.paused:
                self.paused.add(partition)
                newly.append(TopicPartition(self.topic, partition))
        if newly and consumer is not None:
            consumer.pause(newly)
        for partition in list(self.held):
            read_again = (
                (self.topic, partition) in firsts
                and partition not in deferred
                and partition not in self.paused
                and batch > self.sought.get(partition, self.batches)
            )
            if read_again:  # read again from where it was held, and stored: released
                del self.held[partition]
                self.sought.pop(partition, None)
            else:
                offsets.pop((self.topic, partition), None)

    def _seek(self, consumer: Consumer | None, partitions: list[int]) -> None:
        """Read ``partitions`` again from where they are held (the batches consumed so far were
        read before it)."""
        for partition in partitions:
            self.sought[partition] = self.batches
            if consumer is not None:
                consumer.seek(TopicPartition(self.topic, partition, self.held[partition]))
        self.on_seek((self.topic, p) for p in partitions)

    def tick(self, consumer: Consumer | None) -> None:
        """Read the moves every second, and probe the shards away, each in turn, one a second;
        resume a shard's partitions once its database answers, a partition once it has moved."""
        self._tick_moves(consumer)
        if not self.away:
            return
        if self._probe is not None:
            shard, probe = self._probe
            if not probe.done():
                return
            self._probe = None
            if probe.exception() is None:
                self._back(consumer, shard)
            return
        if time.monotonic() - self._probed_at < PROBE_INTERVAL_S:
            return
        self._probed_at = time.monotonic()
        away = sorted(self.away)  # each in turn
        shard = next((a for a in away if a > self._probed_last), away[0])
        self._probed_last = shard
        self._probe = (shard, self._probes.submit(self.stores[shard].ping))

    def _tick_moves(self, consumer: Consumer | None) -> None:
        if self._refresh is not None:
            if not self._refresh.done():
                return
            refresh, self._refresh = self._refresh, None
            if refresh.exception() is None:
                self._moved(consumer, refresh.result())
            return
        if time.monotonic() - self._refreshed_at < MOVES_REFRESH_S:
            return
        self._refreshed_at = time.monotonic()
        answering = [s for i, s in enumerate(self.stores) if i not in self.away]
        self._refresh = self._probes.submit(_read_moves, answering)

    def _moved(self, consumer: Consumer | None, moves: dict[int, PartitionMove]) -> None:
        """The moves as read: a partition held while it moved and now moved is read again."""
        for partition, move in moves.items():
            if move != self.moves.get(partition) and move.state == MOVED:
                log.warning(
                    "partition %d has moved to shard %d: its messages go there",
                    partition,
                    move.shard,
                    extra={"event": "partition_moved", "partition": partition},
                )
        self.moves = moves
        self._release(consumer)

    def _release(self, consumer: Consumer | None) -> list[int]:
        """Read the paused partitions no longer blocked again from where they are held
        (released once a batch has stored them again)."""
        mine = sorted(p for p in self.paused if not self._blocked(p))
        self.paused.difference_update(mine)
        if mine:
            self._seek(consumer, mine)
            if consumer is not None:
                consumer.resume([TopicPartition(self.topic, p) for p in mine])
        return mine

    def _back(self, consumer: Consumer | None, shard: int) -> None:
        """Shard ``shard``'s database answers: its paused partitions are read again."""
        self.away.discard(shard)
        mine = [p for p in self._release(consumer) if self.shard_of(p) == shard]
        log.warning(
            "shard %d's database answers again: its partitions %s are read again from where "
            "they were held",
            shard,
            mine,
            extra={"event": "shard_back", "shard": shard},
        )

    def forget(self, consumer: Consumer | None, partitions: Sequence[TopicPartition]) -> None:
        """Revoked or lost: their next owner reads them from the last commit (never past a held
        record). A paused one is resumed first: the client keeps a pause across a revocation,
        and one assigned back to this node must flow."""
        mine = [p.partition for p in partitions if p.topic == self.topic]
        resumed = [p for p in mine if p in self.paused]
        if resumed and consumer is not None:
            consumer.resume([TopicPartition(self.topic, p) for p in resumed])
        for partition in mine:
            self.held.pop(partition, None)
            self.paused.discard(partition)
            self.sought.pop(partition, None)

    def close(self) -> None:
        self._probes.shutdown(wait=False, cancel_futures=True)


def _read_moves(stores: Sequence[Store]) -> dict[int, PartitionMove]:
    """The moves as every shard that answers records them (a move writes each in turn)."""
    views = []
    for store in stores:
        try:
            views.append(store.partition_moves())
        except StoreError:
            continue  # away: the others say it
    return merge(views)
