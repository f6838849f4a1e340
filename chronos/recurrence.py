"""Recurring messages: the rule of a series, how it is stored, and its occurrences.

A series is one row whose deadline is its next occurrence. ``chronosEvery`` (an ISO-8601
duration, at least 1 s) repeats a fixed period measured from the schedule (occurrence ``k`` is the
first deadline plus ``k`` periods: no drift, whenever each one fired); ``chronosCron`` (five
fields) with ``chronosTimeZone`` (an IANA name, default UTC) repeats by the wall clock of that
zone, as Debian's cron does across daylight-saving changes (the expression is evaluated by
``cronsim``): a job at a fixed time (neither minute nor hour starts with ``*``) that falls in a
skipped hour fires at the first instant after the gap, and once (the first time) in a repeated
hour; a job whose minute or hour field starts with ``*`` follows real time (``*/30 * * * *`` fires
every 30 minutes, so a repeated hour has its occurrences twice and a skipped one none). No
occurrence is ever before the series' start (a start in a repeated hour, or between two
seconds, included). ``chronosUntil`` ends a series: no occurrence after it. ``chronosMissed``
says what happens to the occurrences a series missed while nothing could fire it (the cluster
was down, the backlog too deep): ``latest`` (the default) fires only the latest missed one and
counts the others as skipped (a cron series' one by one up to ``COUNT_LIMIT``, estimated from
the rule's period beyond: the work is bounded whatever the series' age); ``all`` fires every one
of them, oldest first.

The rule is stored as compact JSON text in ``chronos_messages.recurrence`` (``encode`` /
``decode``; NULL: a one-shot message).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

MIN_PERIOD_MS = 1000
COUNT_LIMIT = 2_000
"""Missed occurrences of a cron series counted one by one at most when it fires (33 hours of a
minutely series, 83 days of an hourly one; some 20-50 ms); the ones beyond are estimated from the
rule's period (see ``Rule.plan``). A period series' count is exact and costs nothing."""

_DURATION_RE = re.compile(
    r"^P(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+)(?:[.,](?P<frac>\d{1,3}))?S)?)?$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TICK = timedelta(microseconds=1)  # "at or after" an instant is "after" the instant a tick before


class RecurrenceError(ValueError):
    """A header of a recurring message that cannot be used (the message is dead-lettered)."""


class Missed(StrEnum):
    """What a series does with the occurrences it missed (``chronosMissed``)."""

    LATEST = "latest"  # fire the latest missed occurrence once, count the others as skipped
    ALL = "all"  # fire every missed occurrence, oldest first


def parse_duration_ms(raw: str, header: str) -> int:
    """An ISO-8601 duration of weeks, days, hours, minutes and seconds (milliseconds at most) in
    milliseconds. Years and months have no fixed length: a calendar rule is a cron expression."""
    text = raw.strip().upper()
    match = _DURATION_RE.match(text)
    if match is None or text in ("P", "PT") or text.endswith("T"):
        hint = ""
        if re.match(r"^P(\d+Y|\d+M)", text):
            hint = " (years and months have no fixed length: use chronosCron)"
        raise RecurrenceError(
            f"{header} {raw[:64]!r} is not an ISO-8601 duration like PT5M, PT1.5S or P1D{hint}"
        )
    parts = {k: int(v) for k, v in match.groupdict().items() if v and k != "frac"}
    frac = (match["frac"] or "").ljust(3, "0")
    ms = (
        parts.get("weeks", 0) * 604_800_000
        + parts.get("days", 0) * 86_400_000
        + parts.get("hours", 0) * 3_600_000
        + parts.get("minutes", 0) * 60_000
        + parts.get("seconds", 0) * 1000
        + int(frac)
    )
    if ms > 10 * 366 * 86_400_000:
        raise RecurrenceError(f"{header} {raw[:64]!r} is longer than ten years")
    return ms


DURATION_FORMS = "seconds (90, 1.5), 500ms, 30s, 5m, 2h, 1d or ISO-8601 (PT5M)"
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_WITH_UNIT = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_MAX_DURATION_MS = 10 * 366 * 86_400_000


def parse_duration(raw: str, *, signed: bool = False) -> timedelta:
    """A duration as people write one on the command line, the one grammar of every duration
    flag: seconds (``90``, ``1.5``), a number and a unit (``500ms``, ``30s``, ``5m``, ``2h``,
    ``1d``) or ISO-8601 (``PT5M``, ``P1D``), under ten years; ``signed``: a leading ``-`` (or
    ``+``) for a move back (or forward) in time. ValueError naming the forms otherwise."""
    text = raw.strip().lower()
    sign = 1
    if signed and text[:1] in ("-", "+"):
        sign, text = (-1 if text[0] == "-" else 1), text[1:]
    try:
        if text.startswith("p"):
            ms = float(parse_duration_ms(text, "duration"))
        elif (match := _WITH_UNIT.match(text)) is not None:
            ms = float(match[1]) * _UNIT_MS[match[2]]
        else:
            ms = float(text) * 1000
    except (ValueError, OverflowError):
        ms = float("nan")
    if not 0 <= ms < _MAX_DURATION_MS:
        signs = ", with - for earlier" if signed else ""
        raise ValueError(f"{raw[:64]!r} is not a duration: {DURATION_FORMS}{signs}")
    return sign * timedelta(milliseconds=ms)


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name`` (from the ``tzdata`` package when the system has no zone data)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise RecurrenceError(f"chronosTimeZone {name[:64]!r} is not an IANA time zone") from None


def check_cron(expr: str) -> str:
    """A five-field cron expression, normalised to single spaces, or RecurrenceError."""
    fields = expr.split()
    if len(fields) != 5:
        raise RecurrenceError(
            f"chronosCron {expr[:64]!r} has {len(fields)} fields: it takes five "
            "(minute hour day-of-month month day-of-week)"
        )
    normal = " ".join(fields)
    try:
        CronSim(normal, datetime(2000, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError) as exc:
        raise RecurrenceError(f"chronosCron {expr[:64]!r} is not valid: {exc}") from None
    return normal


@dataclass(frozen=True, slots=True)
class Plan:
    """What firing a claimed series does: the occurrence it fires (epoch seconds), how many
    missed occurrences it skips, and the next occurrence the row advances to (None: the series
    ends and the row is deleted)."""

    fire: float
    skipped: int
    next: float | None
    estimated: bool = False  # more were skipped than counted: the rest is an estimate


@dataclass(frozen=True, slots=True)
class Rule:
    """A series' rule: a period (``every_ms``) or a cron expression in ``zone``."""

    every_ms: int | None = None
    cron: str | None = None
    zone: str = "UTC"
    until: datetime | None = None
    missed: Missed = Missed.LATEST

    # -- storage --------------------------------------------------------------------------

    def encode(self) -> str:
        doc: dict[str, object] = (
            {"every": self.every_ms} if self.every_ms is not None else {"cron": self.cron}
        )
        if self.cron is not None and self.zone != "UTC":
            doc["tz"] = self.zone
        if self.until is not None:
            doc["until"] = _micros(self.until)
        if self.missed is not Missed.LATEST:
            doc["missed"] = self.missed.value
        return json.dumps(doc, separators=(",", ":"))

    def describe(self) -> str:
        """The rule as people read it (admin API, console, logs)."""
        text = (
            f"every {_format_ms(self.every_ms)}"
            if self.every_ms is not None
            else f"cron {self.cron!r} in {self.zone}"
        )
        if self.until is not None:
            text += f" until {self.until.astimezone(UTC).isoformat()}"
        if self.missed is not Missed.LATEST:
            text += f", missed: {self.missed.value}"
        return text

    # -- occurrences ----------------------------------------------------------------------

    def first(self, start: datetime, *, exact: bool) -> datetime:
        """The series' first occurrence: ``start`` itself for a period when ``exact`` (a
        ``chronosDeadline`` was given), else one period after it; for a cron rule, its first
        occurrence at or after ``start`` (``exact``) or after it. Never before ``start``."""
        if self.every_ms is not None:
            return start if exact else start + timedelta(milliseconds=self.every_ms)
        return self._cron_after(start - _TICK if exact else start)

    def after(self, occurrence: datetime) -> datetime | None:
        """The occurrence after ``occurrence`` (None: past ``until``)."""
        if self.every_ms is not None:
            following = occurrence + timedelta(milliseconds=self.every_ms)
        else:
            following = self._cron_after(occurrence)
        return None if self._ended(following) else following

    def _ended(self, occurrence: datetime) -> bool:
        return self.until is not None and occurrence > self.until

    def plan(self, due: float, now: float, *, count_limit: int = COUNT_LIMIT) -> Plan:
        """A claimed occurrence due at ``due`` as the database clock reads ``now`` (both epoch
        seconds): with ``missed: all`` it fires ``due``; with ``latest`` (a series behind by more
        than one occurrence) it fires the latest occurrence not after ``now`` (nor ``until``)
        and skips the ones between. A cron series counts the skipped occurrences one by one up
        to ``count_limit``; past it, the rest is estimated from the mean period of the ones
        counted (none counted: the period from the fired occurrence to the next) and the plan
        says ``estimated``. The work is bounded whatever the series' age: a few steps of the
        expression plus at most ``count_limit``."""
        due_at = _from_epoch(due)
        if self.missed is Missed.ALL or now <= due:
            following = self.after(due_at)
            return Plan(due, 0, None if following is None else following.timestamp())
        limit = _from_epoch(now)
        if self.until is not None and self.until < limit:
            limit = self.until
        estimated = False
        if self.every_ms is not None:
            step = self.every_ms * 1000
            k = max(0, (_micros(limit) - _micros(due_at)) // step)
            latest = due_at + timedelta(microseconds=k * step)
            skipped = k
            following = self.after(latest)
        else:
            latest, after_latest = self._cron_latest(limit)
            if latest < due_at:  # never: ``due`` is an occurrence, not after ``limit``
                latest, after_latest = due_at, self._cron_after(due_at)
            following = None if self._ended(after_latest) else after_latest
            skipped, estimated = self._count_between(due_at, latest, after_latest, count_limit)
        return Plan(
            latest.timestamp(),
            int(skipped),
            None if following is None else following.timestamp(),
            estimated,
        )

    def _cron_after(self, instant: datetime) -> datetime:
        """The first occurrence after ``instant``. The expression is evaluated from the local
        time, which for a fixed-time job (cronsim's Debian rules) is the wall clock alone: in a
        repeated hour it may name an occurrence that already passed, so step on until one is
        after ``instant`` (an hour's worth of steps at most)."""
        occurrences = self._cron_from(instant)
        while (occurrence := next(occurrences)) <= instant:
            pass
        return occurrence

    def _cron_from(self, instant: datetime, *, reverse: bool = False) -> Iterator[datetime]:
        """The occurrences after (``reverse``: before) the second ``instant`` falls in, in order,
        in UTC. The local time is converted from UTC, so an instant in a repeated hour keeps its
        fold. A local time that does not exist (cronsim names one when a job that follows real
        time, ``0 */4 * * 0``, reaches a day that starts in a skipped hour) is no occurrence:
        the skipped hour has none."""
        tz = zone(self.zone)
        if self.zone == "UTC":
            yield from CronSim(self.cron or "", instant.astimezone(UTC), reverse=reverse)
            return
        for local in CronSim(self.cron or "", instant.astimezone(tz), reverse=reverse):
            occurrence = local.astimezone(UTC)
            if occurrence.astimezone(tz) == local:  # a local time that exists
                yield occurrence

    def _cron_latest(self, limit: datetime) -> tuple[datetime, datetime]:
        """The latest occurrence at or before ``limit`` and the one after it: the expression
        evaluated backwards from the local time, then forwards while the next occurrence is not
        after ``limit`` (a fixed-time job's wall clock misses the first pass of a repeated
        hour)."""
        second = limit.replace(microsecond=0) + timedelta(seconds=1)
        latest = next(self._cron_from(second, reverse=True))
        occurrences = self._cron_from(latest)
        while True:
            following = next(occurrences)
            if following <= latest:
                continue
            if following > limit:
                return latest, following
            latest = following

    def _count_between(
        self, first: datetime, last: datetime, after_last: datetime, limit: int
    ) -> tuple[int, bool]:
        """Occurrences from ``first`` (included) to ``last`` (excluded): counted one by one up to
        ``limit``, the rest estimated from the mean period of the ones counted (none counted:
        from ``last`` to the occurrence after it, ``after_last``). Returns the count and whether
        it is an estimate."""
        if last <= first:
            return 0, False
        if limit <= 0:
            return max(1, round((last - first) / (after_last - last))), True
        count = 0
        for occurrence in self._cron_from(first - _TICK):
            if occurrence < first:
                continue  # a fixed-time job's wall clock in a repeated hour (never fired)
            if occurrence >= last:
                return count, False
            if count == limit:  # counted that far and ``last`` not reached: estimate the rest
                period = (occurrence - first) / count
                return count + max(1, round((last - occurrence) / period)), True
            count += 1
        return count, False  # never: ``last`` is an occurrence


def make_rule(
    every: str | None,
    cron: str | None,
    zone_name: str | None,
    until: datetime | None,
    missed: str | None,
) -> Rule | None:
    """The rule the recurrence headers of one record describe (None: a one-shot message), or
    RecurrenceError naming the header at fault."""
    if every is None and cron is None:
        for header, value in (
            ("chronosTimeZone", zone_name),
            ("chronosUntil", until),
            ("chronosMissed", missed),
        ):
            if value is not None:
                raise RecurrenceError(f"{header} needs chronosEvery or chronosCron")
        return None
    if every is not None and cron is not None:
        raise RecurrenceError("chronosEvery and chronosCron exclude each other")
    if every is not None and zone_name is not None:
        raise RecurrenceError("chronosTimeZone applies to chronosCron only (a period is real time)")
    policy = Missed.LATEST
    if missed is not None:
        try:
            policy = Missed(missed.strip().lower())
        except ValueError:
            raise RecurrenceError(
                f"chronosMissed {missed[:64]!r} is not one of latest, all"
            ) from None
    if every is not None:
        period = parse_duration_ms(every, "chronosEvery")
        if period < MIN_PERIOD_MS:
            raise RecurrenceError(f"chronosEvery {every[:64]!r} is shorter than 1 s")
        return Rule(every_ms=period, until=until, missed=policy)
    name = (zone_name or "UTC").strip()
    zone(name)  # refuses an unknown zone
    return Rule(cron=check_cron(cron or ""), zone=name, until=until, missed=policy)


def format_duration(ms: int) -> str:
    """Milliseconds as an ISO-8601 duration in seconds (``PT300S``, ``PT1.5S``)."""
    seconds, rest = divmod(ms, 1000)
    return f"PT{seconds}S" if rest == 0 else f"PT{seconds}.{rest:03d}".rstrip("0") + "S"


@lru_cache(maxsize=4096)
def decode(stored: str) -> Rule:
    """The rule stored in ``chronos_messages.recurrence`` (cached: a series fires again and
    again, and many series share a rule)."""
    doc = json.loads(stored)
    until = doc.get("until")
    return Rule(
        every_ms=doc.get("every"),
        cron=doc.get("cron"),
        zone=doc.get("tz", "UTC"),
        until=None if until is None else _EPOCH + timedelta(microseconds=until),
        missed=Missed(doc.get("missed", Missed.LATEST.value)),
    )


def _micros(instant: datetime) -> int:
    delta = instant - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _from_epoch(seconds: float) -> datetime:
    """Epoch seconds (a claimed row's deadline) as an aware UTC datetime, to the microsecond."""
    return _EPOCH + timedelta(microseconds=round(seconds * 1_000_000))


def _format_ms(ms: int | None) -> str:
    if ms is None:
        return ""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"
