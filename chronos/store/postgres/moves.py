"""Moving an input partition to another shard: ``chronos shards move`` (docs/shards.md).

1. **Moving.** The partition is marked moving in every shard (``chronos_partition_moves``), the
   target first, each shard under the moves' advisory lock taken exclusively: every enqueue
   statement under way there ends first, and every later one sees the mark and stores none of
   the partition's messages (``chronos_partitions_refused``). The nodes hold the partition
   meanwhile: no offset past its first record not stored is committed, and they read it again
   once it has moved. The other shards' live cancel markers are copied to the target.
2. **Copy.** The partition's waiting rows in every other shard are copied to the target in
   batches (binary COPY through a temporary table), each batch deleted from its shard once the
   target has committed it, its rows locked meanwhile (no claim takes them), their tenants made
   known to the target's fair claim. A row whose id has a live cancel marker in the target is
   not copied: it was cancelled. Claimed rows fire where
   they are; passes go on until no other shard holds a row of the partition (a series' next
   occurrence is copied once its claim ends).
3. **Moved.** The target first, then the others: the nodes send the partition's messages to the
   target and read it again from where they held it.

Interrupted anywhere, the partition stays held (moving) and the same command run again goes on:
it looks for the partition's rows in every shard but the target. Rows copied twice are one
(the target keeps the first). Only rows with the partition recorded move (``input_partition``:
every message consumed since schema revision 0019).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from chronos.config.shards import ShardMap, record_mismatch
from chronos.errors import ChronosError, ConfigError
from chronos.store.moves import MOVED, MOVING, PartitionMove, merge
from chronos.store.postgres.session import libpq_url
from chronos.store.postgres.sql import query
from chronos.store.schema import MOVES_LOCK

ONE_MOVE_LOCK = MOVES_LOCK + 1  # one move at a time (a session lock on shard 0)
BATCH = 1000
MARKERS_BATCH = 10_000  # cancel markers copied a statement
PASS_PAUSE_S = (0.5, 5.0)  # between two passes while claimed rows are waited for: from, to
BATCH_TABLE = "chronos_move_batch"

MESSAGE_COLUMNS = sql.SQL(
    "SELECT attname FROM pg_attribute WHERE attrelid = 'chronos_messages'::regclass "
    "AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
)
RECORDED = sql.SQL(
    "SELECT shard, shards, map FROM chronos_shard WHERE id = 1 "
    "AND to_regclass('chronos_partition_moves') IS NOT NULL"
)


@dataclass
class MoveReport:
    partition: int
    target: int
    sources: list[int]  # the shards that held rows of it
    copied: int = 0
    cancelled: int = 0  # rows not copied: a live cancel marker in the target
    markers: int = 0
    batches: int = 0
    passes: int = 0
    held_s: float = 0.0  # from the moving mark to the moved one
    waited_claimed: dict[int, int] = field(default_factory=dict)  # shard -> claimed rows waited


class Shard:
    """A shard's connection for the move (autocommit; transactions explicit)."""

    def __init__(self, index: int, url: str) -> None:
        self.index = index
        self.conn = psycopg.connect(libpq_url(url), autocommit=True, connect_timeout=10)

    def rows(self, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(query(name), params)
            return cur.fetchall() if cur.description is not None else []

    def moves(self) -> list[PartitionMove]:
        return [PartitionMove(*row) for row in self.rows("partition_moves", {})]

    def mark(self, move: PartitionMove) -> None:
        """Write ``move`` under the moves' lock: every enqueue statement under way ends first
        (and the shard's next ones wait behind it: at most ``lock_moves``'s timeout)."""
        with self.conn.transaction():
            self.rows("lock_moves", {"key": MOVES_LOCK})
            self.rows("mark_partition_move", move._asdict())

    def columns(self) -> list[str]:
        with self.conn.cursor() as cur:
            return [r[0] for r in cur.execute(MESSAGE_COLUMNS).fetchall()]


def move_partition(
    urls: Sequence[str],
    layout: ShardMap,
    partition: int,
    target: int,
    *,
    batch: int = BATCH,
    wait_claimed_s: float = 120.0,
    say: Callable[[str], None] = lambda _: None,
) -> MoveReport:
    """Move input ``partition``'s messages to shard ``target`` (see the module). ConfigError
    for a request that cannot be (one database, no such shard, a database that is not the
    shard the settings make it); ChronosError if claimed rows outlast ``wait_claimed_s`` (the
    partition stays held: run it again)."""
    if len(urls) < 2:
        raise ConfigError("CHRONOS_DATABASE_URL names one database: there is no shard to move to")
    if not 0 <= target < len(urls):
        raise ConfigError(f"--to {target}: the shards are 0 to {len(urls) - 1}")
    if partition < 0:
        raise ConfigError(f"partition {partition}: a partition is 0 or more")
    with ExitStack() as stack:
        shards = [Shard(i, url) for i, url in enumerate(urls)]
        for shard in shards:
            stack.callback(shard.conn.close)
        _check_layout(shards, layout)
        if not shards[0].rows("try_lock_move", {"key": ONE_MOVE_LOCK})[0][0]:
            raise ChronosError("another move is under way (shard 0 holds its lock)")
        view = merge(shard.moves() for shard in shards)
        try:
            home = view[partition].shard if partition in view else layout.shard_of(partition)
        except KeyError:
            raise ConfigError(
                f"partition {partition} has no shard in CHRONOS_SHARD_MAP ({layout.spec})"
            ) from None
        moving = partition in view and view[partition].state == MOVING
        others = [s for s in shards if s.index != target]
        if home == target and not moving and not _rows_left(others, partition):
            say(f"partition {partition} is in shard {target} already: nothing to move")
            return MoveReport(partition, target, [])
        columns = shards[target].columns()
        for shard in others:
            if set(shard.columns()) != set(columns):  # COPY names them: their order is free
                raise ChronosError(
                    f"shard {shard.index}'s schema differs from shard {target}'s: run "
                    "`chronos migrate` first"
                )
        for shard in others:
            unknown = shard.rows("rows_without_partition", {})[0][0]
            if unknown:
                raise ChronosError(
                    f"shard {shard.index} holds {unknown} message(s) written without their "
                    "input partition (before schema revision 0019, or by a node of an earlier "
                    "release): a move cannot tell whether they are the partition's; let them "
                    "fire (or cancel them) and run it again"
                )
        generation = max((m.generation for m in view.values()), default=0) + 1
        report = MoveReport(partition, target, [])
        started = time.monotonic()
        say(f"partition {partition}: held while it moves to shard {target}")
        for shard in [shards[target], *others]:
            shard.mark(PartitionMove(partition, target, MOVING, generation))
        for shard in others:
            report.markers += _copy_cancels(shard, shards[target])
        _copy_passes(others, shards[target], columns, report, batch, wait_claimed_s, say)
        for shard in [shards[target], *others]:
            shard.mark(PartitionMove(partition, target, MOVED, generation + 1))
        report.held_s = time.monotonic() - started
        shards[0].rows("unlock_move", {"key": ONE_MOVE_LOCK})
        say(
            f"partition {partition} moved to shard {target}: {report.copied} messages copied "
            f"({report.cancelled} cancelled meanwhile), {report.markers} cancel markers, held "
            f"{report.held_s:.1f} s"
        )
        return report
    raise AssertionError("unreachable")  # pragma: no cover


def _check_layout(shards: list[Shard], layout: ShardMap) -> None:
    for shard in shards:
        with shard.conn.cursor() as cur:
            row = cur.execute(RECORDED).fetchone()
        if row is None:
            raise ConfigError(
                f"database {shard.index} of CHRONOS_DATABASE_URL is not a recorded shard at "
                "schema revision 0019 or later: run `chronos migrate` first"
            )
        mismatch = record_mismatch((row[0], row[1], row[2]), shard.index, layout)
        if mismatch is not None:
            raise ConfigError(mismatch)


def _rows_left(shards: list[Shard], partition: int) -> dict[int, tuple[int, int]]:
    """Shard -> (rows, claimed rows) of ``partition``, for the shards that hold any."""
    left = {}
    for shard in shards:
        rows, claimed = shard.rows("partition_rows_left", {"partition": partition})[0]
        if rows:
            left[shard.index] = (rows, claimed)
    return left


def _copy_cancels(source: Shard, target: Shard) -> int:
    markers = source.rows("live_cancels", {})
    for start in range(0, len(markers), MARKERS_BATCH):
        part = markers[start : start + MARKERS_BATCH]
        target.rows("copy_cancels", {"ids": [m[0] for m in part], "expires": [m[1] for m in part]})
    return len(markers)


def _copy_passes(
    sources: list[Shard],
    target: Shard,
    columns: list[str],
    report: MoveReport,
    batch: int,
    wait_claimed_s: float,
    say: Callable[[str], None],
) -> None:
    """Copy passes until no source holds a row of the partition (claimed ones are waited for)."""
    deadline = time.monotonic() + wait_claimed_s
    pause = PASS_PAUSE_S[0]
    while True:
        report.passes += 1
        for source in sources:
            after = ""
            while (last := _copy_batch(source, target, columns, report, after, batch)) is not None:
                after = last
                if source.index not in report.sources:
                    report.sources.append(source.index)
        left = _rows_left(sources, report.partition)
        if not left:
            return
        for shard, (_, claimed) in left.items():
            report.waited_claimed[shard] = max(report.waited_claimed.get(shard, 0), claimed)
        if time.monotonic() > deadline:
            where = ", ".join(f"shard {s}: {n} ({c} claimed)" for s, (n, c) in left.items())
            raise ChronosError(
                f"partition {report.partition} still has rows outside shard {target.index} "
                f"after {wait_claimed_s:.0f} s ({where}); it stays held: run the same command "
                "again to finish the move"
            )
        if report.passes % 10 == 0:
            say(f"waiting for claimed rows to fire: {left}")
        time.sleep(pause)
        pause = min(PASS_PAUSE_S[1], pause * 2)  # each pass walks the shards: fewer of them


def _copy_batch(
    source: Shard,
    target: Shard,
    columns: list[str],
    report: MoveReport,
    after: str,
    batch: int,
) -> str | None:
    """Copy the next ``batch`` waiting rows of the partition after id ``after`` from ``source``
    to ``target`` and delete them from ``source``; the last id, or None when there were none."""
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
    table = sql.Identifier(BATCH_TABLE)
    params = {"partition": report.partition, "after": after, "limit": batch}
    with source.conn.transaction():
        ids = [r[0] for r in source.rows("partition_rows_to_move", params)]
        if not ids:
            return None
        with target.conn.transaction(), target.conn.cursor() as tcur:
            tcur.execute(
                sql.SQL(
                    "CREATE TEMP TABLE IF NOT EXISTS {} (LIKE chronos_messages) "
                    "ON COMMIT DELETE ROWS"
                ).format(table)
            )
            out = sql.SQL(
                "COPY (SELECT {} FROM chronos_messages WHERE id = ANY(%s::text[])) "
                "TO STDOUT (FORMAT BINARY)"
            ).format(cols)
            into = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(table, cols)
            with (
                source.conn.cursor() as scur,
                scur.copy(out, (ids,)) as rows_out,
                tcur.copy(into) as rows_in,
            ):
                for data in rows_out:
                    rows_in.write(data)
            inserted = tcur.execute(
                sql.SQL(
                    "INSERT INTO chronos_messages ({cols}) SELECT {cols} FROM {table} b "
                    "WHERE NOT EXISTS (SELECT 1 FROM chronos_cancels c "
                    "WHERE c.id = b.id AND c.expires_at > now()) "
                    "ON CONFLICT (id) DO NOTHING RETURNING id"
                ).format(cols=cols, table=table)
            ).fetchall()
            tcur.execute(  # the fair claim visits the tenants it knows
                sql.SQL(
                    "INSERT INTO chronos_tenants (tenant) SELECT DISTINCT tenant FROM {} "
                    "WHERE tenant IS NOT NULL ORDER BY tenant ON CONFLICT (tenant) DO NOTHING"
                ).format(table)
            )
            cancelled = tcur.execute(
                sql.SQL(
                    "SELECT count(*) FROM {} b WHERE EXISTS (SELECT 1 FROM chronos_cancels c "
                    "WHERE c.id = b.id AND c.expires_at > now())"
                ).format(table)
            ).fetchone()
        source.rows("delete_moved_rows", {"ids": ids, "partition": report.partition})
    report.copied += len(inserted)
    report.cancelled += cancelled[0] if cancelled else 0
    report.batches += 1
    return str(ids[-1])


def describe_shards(urls: Sequence[str], layout: ShardMap) -> list[str]:
    """``chronos shards show``: the map, and the partitions moved away from it (as every shard
    that answers records them)."""
    if len(urls) < 2:
        return ["one database: no shards (docs/shards.md)"]
    lines = [f"{len(urls)} shards, map {layout.spec} (CHRONOS_SHARD_MAP)"]
    views = []
    for index, url in enumerate(urls):
        try:
            shard = Shard(index, url)
        except psycopg.Error as exc:
            lines.append(f"shard {index}: unavailable ({exc})")
            continue
        try:
            views.append(shard.moves())
        finally:
            shard.conn.close()
    moved = merge(views)
    if not moved:
        lines.append("no partition moved away from the map")
    for move in sorted(moved.values()):
        how = "moving to" if move.state == MOVING else "moved to"
        lines.append(f"partition {move.partition}: {how} shard {move.shard}")
    return lines
