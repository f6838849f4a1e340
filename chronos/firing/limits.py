"""Rate limits per tenant and per target topic, as one node enforces its share of them.

The limits (``chronos_limits``) are read every ``PAUSE_REFRESH_S``; each is shared between the
live nodes (``per_second / live nodes``, the count the catch-up pacer reads; with several shards,
between each node's shard lanes too: never exceeded, docs/shards.md) as a token bucket
holding at most ``BURST_S`` seconds of the share (one token at least), kept as a theoretical
arrival time (GCRA): a row spends a token *at the instant it will fire* (its deadline, for a
row claimed ahead within the lookahead), not at its claim, so rows claimed ahead never add to a
burst. Hence the bound, documented in docs/operations.md: any window of W seconds sees at most
``per_second * W + max(per_second * BURST_S, live nodes)`` of a limit's messages (each node's
bucket is ``max(1, share * BURST_S)``). Before a claim, the limited tenants and topics without a
token are left out of it, as a pause leaves them out; after it, the rows of a limited tenant or
topic beyond its tokens are given back at once (one statement for the batch, never per message):
they wait in the table, never dropped, and are claimed again as tokens come. A tenant or topic
whose rows were given back is left out of the claims until its bucket is half full again (the
loop claims again at once meanwhile), so that its rows never fill the batch ahead of the
others'. One-shot rows past their expiry limit are kept whatever the tokens (dead-lettered,
never fired to the limited topic: the claim takes them as it takes a paused tenant's); a
series' occurrence always spends a token (the dispatcher fires its latest missed occurrence,
which is not expired). The output topic is one key whether a row names it or not.
``chronos_rate_limited_messages{kind,name}`` is how many this node gave back at its latest
claim of them (a lower bound of what waits).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from chronos.config.settings import Settings
from chronos.errors import StoreError
from chronos.firing.pauses import flow_control_unreadable
from chronos.observability import metrics
from chronos.store import PAUSE_REFRESH_S, ClaimedRow, Limit, PauseKind, PauseSet, Store

log = logging.getLogger(__name__)

BURST_S = 0.5  # the bucket, in seconds of the share: a burst of half a second's messages
REST_SHARE = 0.5  # a key whose rows were given back waits for half a bucket


Key = tuple[PauseKind, str]


@dataclass(slots=True)
class Bucket:
    """One limit's share on this node, as GCRA keeps it: ``tat`` (monotonic seconds) is when the
    bucket is full again; it holds ``cap`` tokens and gains one every ``interval`` seconds."""

    interval: float
    cap: float
    tat: float

    def tokens(self, at: float) -> float:
        """Tokens held at ``at`` (monotonic seconds; fractional)."""
        return max(0.0, min(self.cap, (at - self.tat) / self.interval + self.cap))

    def resize(self, now: float, interval: float, cap: float) -> None:
        """A new share (a node joined or left, the limit changed): the tokens held now (or owed,
        below zero) stay, within the new cap."""
        if (interval, cap) == (self.interval, self.cap):
            return
        held = min(cap, (now - self.tat) / self.interval + self.cap)
        self.interval, self.cap = interval, cap
        self.tat = now - (held - cap) * interval

    def spend(self, at: float) -> None:
        """One token, spent by a row that fires at ``at``."""
        self.tat = max(self.tat, at) + self.interval


class LimitWatch:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        live_nodes: Callable[[float], int],
    ):
        self.store = store
        self.max_lateness_ms = settings.max_lateness_ms or None
        self.advance_s = settings.timing_advance_ms / 1000
        self.output_topic = settings.output_topic
        self.live_nodes = live_nodes
        self.limits: dict[Key, int] = {}  # (kind, key as the claim has it)
        self.buckets: dict[Key, Bucket] = {}
        self.resting: set[Key] = set()  # left out until their bucket is half full
        self.read_at: float | None = None
        self.known = False  # False until read, and while a read fails: claim nothing then
        self._series: set[tuple[str, str]] = set()

    def exclude(self, paused: PauseSet, now: float) -> PauseSet:
        """``paused``, with the limited tenants and topics that hold no token this claim."""
        if self.read_at is None or now - self.read_at >= PAUSE_REFRESH_S:
            self._read(now)
        if not self.limits:
            return paused
        nodes = max(1, self.live_nodes(now))
        for key, per_second in self.limits.items():
            share = per_second / nodes
            interval, cap = 1.0 / share, max(1.0, share * BURST_S)
            bucket = self.buckets.get(key)
            if bucket is None:  # a new limit starts empty: no burst when it is set
                bucket = self.buckets[key] = Bucket(interval, cap, now + cap * interval)
            bucket.resize(now, interval, cap)
            if bucket.tokens(now) >= bucket.cap * REST_SHARE:
                self.resting.discard(key)
        # A key whose rows were given back rests until its bucket is half full: its rows,
        # oldest first, would otherwise fill every claim's batch ahead of everyone else's.
        dry = [k for k, b in self.buckets.items() if b.tokens(now) < 1 or k in self.resting]
        tenants = {n for k, n in dry if k is PauseKind.TENANT}
        topics = {n for k, n in dry if k is PauseKind.TOPIC}
        if "" in topics:
            topics.add(self.output_topic)  # the rows that name it, as those that name none
        return PauseSet(paused.tenants | tenants, paused.topics | topics)

    def take(self, rows: list[ClaimedRow], now: float) -> tuple[list[ClaimedRow], list[ClaimedRow]]:
        """The claimed rows within the limits' tokens at the instants they will fire (oldest
        first; ``now``: monotonic seconds as the claim returned), and those over them."""
        if not self.limits:
            return rows, []
        kept: list[ClaimedRow] = []
        over: list[ClaimedRow] = []
        held: dict[Key, int] = {}
        for row in rows:
            limit_ms = row.expires_ms if row.expires_ms is not None else self.max_lateness_ms
            if row.recurrence is None and limit_ms is not None and -row.remaining_ms > limit_ms:
                kept.append(row)  # expired: dead-lettered, never fired to its topic
                continue
            keys = [k for k in self._keys(row) if k in self.limits]
            fires_at = now + max(0.0, row.remaining_ms / 1000 - self.advance_s)
            if all(self.buckets[k].tokens(fires_at) >= 1 for k in keys):
                for k in keys:
                    self.buckets[k].spend(fires_at)
                kept.append(row)
            else:
                over.append(row)
                for k in keys:
                    held[k] = held.get(k, 0) + 1
                self.resting.update(k for k in keys if self.buckets[k].tokens(now) < 1)
        for kind, name in self.limits:
            if (kind, name) in held or not over:
                shown = self.output_topic if kind is PauseKind.TOPIC and not name else name
                metrics.RATE_LIMITED.labels(kind.value, shown).set(held.get((kind, name), 0))
        return kept, over

    def _keys(self, row: ClaimedRow) -> tuple[Key, Key]:
        topic = row.target_topic or ""
        if topic == self.output_topic:
            topic = ""  # one bucket for the output topic, named or not
        return (PauseKind.TENANT, row.tenant or ""), (PauseKind.TOPIC, topic)

    def _read(self, now: float) -> None:
        try:
            limits = self.store.limits()
        except StoreError as exc:
            self.known = False
            flow_control_unreadable("the rate limits", exc)
            return
        self.known = True
        self.read_at = now
        fresh = {(x.kind, self._key(x)): x.per_second for x in limits}
        if fresh != self.limits:
            log.info(
                "rate limits in force: %s",
                {f"{k.value} {n!r}": v for (k, n), v in fresh.items()},
                extra={"event": "limits_changed"},
            )
        self.limits = fresh
        self.buckets = {k: b for k, b in self.buckets.items() if k in fresh}
        self.resting &= set(fresh)
        series = {(x.kind.value, x.name) for x in limits}
        for gone in self._series - series:
            metrics.remove_series(metrics.RATE_LIMITED, *gone)
        self._series = series

    def _key(self, limit: Limit) -> str:
        """The name as the claim compares it ('' for the output topic)."""
        if limit.kind is PauseKind.TOPIC and limit.name == self.output_topic:
            return ""
        return limit.name
