"""The soak's mix (``run --mix``): besides one-shot messages, messages cancelled or rescheduled
later, recurring series and several tenants, in one open-loop stream of records.

Every slot of the schedule sends one record (``--rate`` counts records): a follow-up that has
come due (a cancel or a reschedule of an earlier message), else a new message. A new message is

* a **series** with ``series_share`` (``chronosEvery`` of ``series_every_ms``,
  ``series_occurrences`` occurrences, ``chronosMissed: all`` so that every occurrence must fire);
* a message **cancelled** later with ``cancel_share``, or **rescheduled** later (to a new delay
  drawn from the same distribution) with ``reschedule_share``: the follow-up goes out at a
  random point of the first 10-90 % of the time left before the deadline minus ``margin_ms``
  (at most ``followup_within_ms`` after the message), with the same key (one partition, read in
  order); a message too close to its deadline, or whose follow-up would come after the last
  slot, stays a one-shot message;
* otherwise a **one-shot** message.

Each new message belongs to tenant ``soak-NN`` (round robin over ``tenants``; ``chronosTenant``
and the tracking header ``loadtestTenant``) and to key ``key-N`` (round robin over the keys).

**Tracking numbers.** Every fire expected of the run gets the next number 0, 1, 2, ... (its row in
``sent.parquet``, its ``loadtestId`` ``<run>-<n>``): a one-shot message one; a series one per
occurrence, consecutive (the record carries the first and ``loadtestEveryMs``; the recorder
numbers each occurrence from the instant the node relays beside it); a rescheduled message one,
given when the reschedule is sent, with the new deadline. A record that must never fire carries
a negative number: ``-1, -3, -5, ...`` a message cancelled later, ``-2, -4, ...`` the schedule a
reschedule replaced. The analysis counts fires of either (``loadtest.analysis.soak``).
"""

from __future__ import annotations

import argparse
import heapq
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from loadtest.harness import headers as h
from loadtest.harness.delays import Delay

TENANT_PREFIX = "soak-"
CANCEL, RESCHEDULE = "cancel", "reschedule"
MIN_FOLLOWUP_WINDOW_MS = 1000

Headers = list[tuple[str, str | bytes | None]]


@dataclass(frozen=True, slots=True)
class Mix:
    cancel_share: float = 0.05
    reschedule_share: float = 0.05
    series_share: float = 0.01
    series_every_ms: int = 60_000
    series_occurrences: int = 10
    tenants: int = 10
    margin_ms: int = 5_000  # a follow-up goes out at least this long before the deadline
    followup_within_ms: int = 600_000  # ... and at most this long after its message

    def __post_init__(self) -> None:
        shares = (self.cancel_share, self.reschedule_share, self.series_share)
        if any(not 0 <= s <= 1 for s in shares) or sum(shares) > 1:
            raise ValueError("the shares must be within 0..1 and add up to at most 1")
        if self.series_every_ms < 1000 or self.series_every_ms % 1000:
            raise ValueError("a series' period is whole seconds, at least 1 s")
        if self.series_occurrences < 1 or self.tenants < 0:
            raise ValueError("a series has at least one occurrence; tenants >= 0")

    @property
    def tenant_names(self) -> list[str]:
        return [f"{TENANT_PREFIX}{i:02d}" for i in range(self.tenants)]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"{self.cancel_share:.0%} cancelled, {self.reschedule_share:.0%} rescheduled, "
            f"{self.series_share:.0%} series of {self.series_occurrences} every "
            f"{self.series_every_ms / 1000:g} s, {self.tenants} tenants"
        )

    def harness_args(self) -> list[str]:
        return [
            "--mix",
            "--cancel-share", f"{self.cancel_share:g}",
            "--reschedule-share", f"{self.reschedule_share:g}",
            "--series-share", f"{self.series_share:g}",
            "--series-every", f"{self.series_every_ms // 1000}s",
            "--series-occurrences", str(self.series_occurrences),
            "--tenants", str(self.tenants),
        ]  # fmt: skip


@dataclass(slots=True)
class Planned:
    """One record to send: its key and tenant (indexes, -1: none), headers, and the deadlines
    of the fires it adds (numbered on from the fires before it)."""

    key_ix: int
    tenant_ix: int
    headers: Headers
    deadlines: list[int]


@dataclass(slots=True)
class MixCounts:
    records: int = 0
    one_shot: int = 0
    series: int = 0
    occurrences: int = 0
    cancelled: int = 0  # messages cancelled later (their cancels sent)
    rescheduled: int = 0  # messages rescheduled later (their reschedules sent)
    followups_at_end: int = 0  # follow-ups still waiting after the last slot, sent then

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(order=True, slots=True)
class _FollowUp:
    due_ms: int
    order: int
    kind: str = field(compare=False)
    message: int = field(compare=False)
    never: int = field(compare=False, default=0)  # the tracking number that must never fire


class MixPlanner:
    """Decides each slot's record (see the module docstring); not thread-safe."""

    def __init__(
        self,
        mix: Mix,
        delay: Delay,
        rng: random.Random,
        *,
        run_id: str,
        start_ms: int,
        end_ms: int,
        keys: int | None,
        fmt: Callable[[int], str],
    ) -> None:
        self.mix = mix
        self.delay = delay
        self.rng = rng
        self.start_ms = start_ms
        self.end_ms = end_ms  # the last slot: no follow-up is planned after it
        self.keys = keys
        self.fmt = fmt
        self.counts = MixCounts()
        self.fires = 0  # expected fires numbered so far
        self._prefix = f"{run_id}-"
        self._run = run_id.encode()
        self._tenants = [n.encode() for n in mix.tenant_names]
        self._pending: list[_FollowUp] = []
        self._messages = 0
        # Each follow-up sent: (chronosMessageId, the id that must never fire, the id of the
        # reschedule's fire or None for a cancel): the analysis needs them to tell a follow-up
        # that reached its message while claimed (not applied, by contract) from a loss.
        self.followups: list[tuple[str, str, str | None]] = []
        self._every = f"PT{mix.series_every_ms // 1000}S"

    def next(self, now_ms: int) -> Planned:
        """The record to send at ``now_ms``."""
        self.counts.records += 1
        if self._pending and self._pending[0].due_ms <= now_ms:
            return self._followup(heapq.heappop(self._pending), now_ms)
        return self._new(now_ms)

    def leftovers(self, now_ms: int) -> list[Planned]:
        """Follow-ups still waiting after the last slot (none unless the producer fell far
        behind): sent at once, so that no cancel or reschedule is left out."""
        out = []
        while self._pending:
            self.counts.followups_at_end += 1
            out.append(self._followup(heapq.heappop(self._pending), now_ms))
        return out

    # -- records ------------------------------------------------------------------------------
    def _key_tenant(self, message: int) -> tuple[int, int]:
        key_ix = -1 if self.keys is None else message % self.keys
        tenant_ix = message % len(self._tenants) if self._tenants else -1
        return key_ix, tenant_ix

    def _headers(
        self, message: int, tracking: int, deadline: int, now_ms: int, tenant_ix: int
    ) -> Headers:
        out: Headers = [
            (h.CHRONOS_MESSAGE_ID, f"{self._prefix}m{message}"),
            (h.CHRONOS_DEADLINE, self.fmt(deadline)),
            (h.RUN, self._run),
            (h.ID, f"{self._prefix}{tracking}"),
            (h.DEADLINE_MS, str(deadline)),
            (h.SENT_MS, str(now_ms)),
        ]
        if tenant_ix >= 0:
            out += [
                (h.CHRONOS_TENANT, self._tenants[tenant_ix]),
                (h.TENANT, self._tenants[tenant_ix]),
            ]
        return out

    def _number(self, count: int) -> int:
        first = self.fires
        self.fires += count
        return first

    def _new(self, now_ms: int) -> Planned:
        mix, c = self.mix, self.counts
        message = self._messages
        self._messages += 1
        key_ix, tenant_ix = self._key_tenant(message)
        pick = self.rng.random()
        if pick < mix.series_share:
            return self._series(message, now_ms, key_ix, tenant_ix)
        deadline = self.delay.deadline_ms(now_ms, self.start_ms, self.rng)
        pick -= mix.series_share
        kind = CANCEL if pick < mix.cancel_share else None
        if kind is None and pick - mix.cancel_share < mix.reschedule_share:
            kind = RESCHEDULE
        due = None if kind is None else self._followup_due(now_ms, deadline)
        if kind is None or due is None:
            c.one_shot += 1
            tracking = self._number(1)
            headers = self._headers(message, tracking, deadline, now_ms, tenant_ix)
            return Planned(key_ix, tenant_ix, headers, [deadline])
        if kind == CANCEL:
            tracking = -(2 * c.cancelled + 1)
            c.cancelled += 1
        else:
            tracking = -(2 * c.rescheduled + 2)
            c.rescheduled += 1
        heapq.heappush(self._pending, _FollowUp(due, message, kind, message, tracking))
        return Planned(
            key_ix, tenant_ix, self._headers(message, tracking, deadline, now_ms, tenant_ix), []
        )

    def _followup_due(self, now_ms: int, deadline: int) -> int | None:
        window = min(deadline - self.mix.margin_ms - now_ms, self.mix.followup_within_ms)
        if window < MIN_FOLLOWUP_WINDOW_MS:
            return None
        due = now_ms + int(window * (0.1 + 0.8 * self.rng.random()))
        return due if due <= self.end_ms - MIN_FOLLOWUP_WINDOW_MS else None

    def _series(self, message: int, now_ms: int, key_ix: int, tenant_ix: int) -> Planned:
        mix, c = self.mix, self.counts
        c.series += 1
        c.occurrences += mix.series_occurrences
        every = mix.series_every_ms
        first = now_ms + every
        deadlines = [first + k * every for k in range(mix.series_occurrences)]
        headers = self._headers(message, self._number(len(deadlines)), first, now_ms, tenant_ix)
        headers += [
            (h.CHRONOS_EVERY, self._every),
            (h.CHRONOS_UNTIL, self.fmt(deadlines[-1] + every // 2)),
            (h.CHRONOS_MISSED, "all"),
            (h.EVERY_MS, str(every)),
        ]
        return Planned(key_ix, tenant_ix, headers, deadlines)

    def _followup(self, followup: _FollowUp, now_ms: int) -> Planned:
        key_ix, tenant_ix = self._key_tenant(followup.message)
        message_id, never = f"{self._prefix}m{followup.message}", f"{self._prefix}{followup.never}"
        if followup.kind == CANCEL:
            self.followups.append((message_id, never, None))
            headers: Headers = [
                (h.CHRONOS_MESSAGE_ID, message_id),
                (h.CHRONOS_ACTION, CANCEL),
            ]
            return Planned(key_ix, tenant_ix, headers, [])
        deadline = self.delay.deadline_ms(now_ms, self.start_ms, self.rng)
        tracking = self._number(1)
        self.followups.append((message_id, never, f"{self._prefix}{tracking}"))
        headers = self._headers(followup.message, tracking, deadline, now_ms, tenant_ix)
        headers.append((h.CHRONOS_ACTION, RESCHEDULE))
        return Planned(key_ix, tenant_ix, headers, [deadline])


# -- the command line (``python -m loadtest run``) --------------------------------------------
def add_arguments(parser: argparse.ArgumentParser, duration: Callable[[str], float]) -> None:
    group = parser.add_argument_group(
        "the soak's mix (with --mix: cancels, reschedules, series and tenants among the "
        "messages; --rate counts records, follow-ups included)"
    )
    d = Mix()
    group.add_argument("--mix", action="store_true", help="send the mix")
    for name, default in (
        ("--cancel-share", d.cancel_share),
        ("--reschedule-share", d.reschedule_share),
        ("--series-share", d.series_share),
    ):
        group.add_argument(name, type=float, default=default, help=f"default {default:g}")
    group.add_argument(
        "--series-every",
        type=duration,
        default=d.series_every_ms / 1000,
        help="a series' period, whole seconds (default 60s)",
    )
    group.add_argument("--series-occurrences", type=int, default=d.series_occurrences)
    group.add_argument("--tenants", type=int, default=d.tenants, help="tenants soak-00 ...")


def from_args(args: argparse.Namespace) -> Mix | None:
    """The mix of ``run``'s options (None without ``--mix``)."""
    if not args.mix:
        return None
    try:
        return Mix(
            cancel_share=args.cancel_share,
            reschedule_share=args.reschedule_share,
            series_share=args.series_share,
            series_every_ms=round(args.series_every * 1000),
            series_occurrences=args.series_occurrences,
            tenants=args.tenants,
        )
    except ValueError as exc:
        raise SystemExit(f"loadtest run: {exc}") from None
