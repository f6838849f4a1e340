"""Rate limits per tenant and per target topic, as one node enforces its share of them.

The limits (``chronos_limits``) are read every ``PAUSE_REFRESH_S``; each is shared between the
live nodes (``per_second / live nodes``, the count the catch-up pacer reads) as a token bucket
holding at most ``BURST_S`` seconds of the share (one token at least). Before a claim, the
limited tenants and topics without a token are left out of it, as a pause leaves them out; after
it, the rows of a limited tenant or topic beyond its tokens are given back at once (one
statement for the batch, never per message): they wait in the table, never dropped, and are
claimed again as tokens come. A tenant or topic whose rows were given back is left out of the
claims until its bucket is half full again (the loop claims again at once meanwhile), so that
its rows never fill the batch ahead of the others'. Rows past their expiry limit are kept
whatever the tokens (dead-lettered, never fired to the limited topic: the claim takes them as it
takes a paused tenant's). ``chronos_rate_limited_messages{kind,name}`` is how many this node
gave back at its latest claim of them (a lower bound of what waits).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from chronos.config.settings import Settings
from chronos.errors import StoreError
from chronos.observability import metrics
from chronos.store import PAUSE_REFRESH_S, ClaimedRow, Limit, PauseKind, PauseSet, Store

log = logging.getLogger(__name__)

BURST_S = 0.5  # the bucket: a 10-s window sees at most 10.5 s of the limit
REST_SHARE = 0.5  # a key whose rows were given back waits for half a bucket


class LimitWatch:
    def __init__(self, settings: Settings, store: Store, live_nodes: Callable[[float], int]):
        self.store = store
        self.max_lateness_ms = settings.max_lateness_ms or None
        self.output_topic = settings.output_topic
        self.live_nodes = live_nodes
        self.limits: dict[tuple[PauseKind, str], int] = {}  # (kind, key as the claim has it)
        self.tokens: dict[tuple[PauseKind, str], float] = {}
        self.resting: set[tuple[PauseKind, str]] = set()  # left out until their bucket is full
        self.read_at: float | None = None
        self.filled_at: float | None = None
        self._series: set[tuple[str, str]] = set()

    def exclude(self, paused: PauseSet, now: float) -> PauseSet:
        """``paused``, with the limited tenants and topics that hold no token this claim."""
        if self.read_at is None or now - self.read_at >= PAUSE_REFRESH_S:
            self._read(now)
        if not self.limits:
            return paused
        nodes = max(1, self.live_nodes(now))
        elapsed = 0.0 if self.filled_at is None else now - self.filled_at
        self.filled_at = now
        for key, per_second in self.limits.items():
            share = per_second / nodes
            cap = max(1.0, share * BURST_S)
            self.tokens[key] = min(cap, self.tokens.get(key, 0.0) + share * elapsed)
            if self.tokens[key] >= cap * REST_SHARE:
                self.resting.discard(key)
        # A key whose rows were given back rests until its bucket is half full: its rows,
        # oldest first, would otherwise fill every claim's batch ahead of everyone else's.
        dry = [k for k, t in self.tokens.items() if t < 1 or k in self.resting]
        tenants = {n for k, n in dry if k is PauseKind.TENANT}
        topics = {n for k, n in dry if k is PauseKind.TOPIC}
        return PauseSet(paused.tenants | tenants, paused.topics | topics)

    def take(self, rows: list[ClaimedRow]) -> tuple[list[ClaimedRow], list[ClaimedRow]]:
        """The claimed rows within the limits' tokens (oldest first), and those over them."""
        if not self.limits:
            return rows, []
        kept: list[ClaimedRow] = []
        over: list[ClaimedRow] = []
        held: dict[tuple[PauseKind, str], int] = {}
        for row in rows:
            limit_ms = row.expires_ms if row.expires_ms is not None else self.max_lateness_ms
            if limit_ms is not None and -row.remaining_ms > limit_ms:
                kept.append(row)  # expired: dead-lettered, never fired to its topic
                continue
            keys = [
                k
                for k in ((PauseKind.TENANT, row.tenant), (PauseKind.TOPIC, row.target_topic or ""))
                if k in self.limits
            ]
            if all(self.tokens[k] >= 1 for k in keys):
                for k in keys:
                    self.tokens[k] -= 1
                kept.append(row)
            else:
                over.append(row)
                for k in keys:
                    held[k] = held.get(k, 0) + 1
                self.resting.update(k for k in keys if self.tokens[k] < 1)
        for kind, name in self.limits:
            if (kind, name) in held or not over:
                shown = self.output_topic if kind is PauseKind.TOPIC and not name else name
                metrics.RATE_LIMITED.labels(kind.value, shown).set(held.get((kind, name), 0))
        return kept, over

    def _read(self, now: float) -> None:
        try:
            limits = self.store.limits()
        except StoreError as exc:  # keep the last limits: the claim reports the outage
            log.debug("could not read the rate limits: %s", exc)
            return
        self.read_at = now
        fresh = {(x.kind, self._key(x)): x.per_second for x in limits}
        if fresh != self.limits:
            log.info(
                "rate limits in force: %s",
                {f"{k.value} {n!r}": v for (k, n), v in fresh.items()},
                extra={"event": "limits_changed"},
            )
        self.limits = fresh
        self.tokens = {k: t for k, t in self.tokens.items() if k in fresh}
        self.resting &= set(fresh)
        series = {(x.kind.value, x.name) for x in limits}
        for gone in self._series - series:
            metrics.RATE_LIMITED.remove(*gone)
        self._series = series

    def _key(self, limit: Limit) -> str:
        """The name as the claim compares it ('' for the output topic)."""
        if limit.kind is PauseKind.TOPIC and limit.name == self.output_topic:
            return ""
        return limit.name
