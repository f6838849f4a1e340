"""``chronosDeadline``'s text form: ISO-8601, parsed to an aware UTC instant and written back in
the canonical form (UTC, milliseconds, ``Z``)."""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime

from chronos.protocol.names import DEADLINE_HEADER

# YYYY-MM-DDTHH:MM:SS[.fff[fff]][Z|±hh:mm]; a space is accepted in place of 'T'.
_DEADLINE_RE = re.compile(
    r"^(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}:\d{2})"
    r"(?:\.(?P<frac>\d{1,6}))?"
    r"(?P<tz>Z|z|[+-]\d{2}:?\d{2})?$"
)


class DeadlineError(ValueError):
    pass


def parse_deadline(raw: str) -> datetime:
    """Parse ``chronosDeadline`` into an aware UTC datetime (microsecond precision kept)."""
    match = _DEADLINE_RE.match(raw.strip())
    if match is None:
        raise DeadlineError(
            f"{DEADLINE_HEADER} {raw[:64]!r} is not ISO-8601 like 2022-12-01T11:09:01.123Z"
        )
    frac = (match["frac"] or "").ljust(6, "0")
    tz = match["tz"]
    if tz is None or tz in ("Z", "z"):
        suffix = "+00:00"
    else:
        suffix = tz if ":" in tz else f"{tz[:3]}:{tz[3:]}"
        if int(suffix[1:3]) > 23 or int(suffix[4:6]) > 59:
            raise DeadlineError(f"{DEADLINE_HEADER} {raw[:64]!r} has an impossible UTC offset")
    try:
        parsed = datetime.fromisoformat(f"{match['date']}T{match['time']}.{frac}{suffix}")
    except ValueError as exc:
        raise DeadlineError(
            f"{DEADLINE_HEADER} {raw[:64]!r} is not a valid instant: {exc}"
        ) from None
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise DeadlineError(f"{DEADLINE_HEADER} {raw[:64]!r} is out of range") from None


def format_deadline(deadline: datetime) -> str:
    """The canonical header form: UTC, milliseconds, ``Z``."""
    utc = deadline.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


_last_second: tuple[int, str] = (0, "1970-01-01T00:00:00.")  # (second, its text): one entry


def format_epoch(epoch: float) -> str:
    """``format_deadline(datetime.fromtimestamp(epoch, UTC))`` without the datetime, for the
    firing path (a header on every fired record): the microseconds rounded as ``fromtimestamp``
    rounds them (half to even), the whole second's text kept from the call before (a batch's
    deadlines share their seconds)."""
    global _last_second
    fraction, whole = math.modf(epoch)
    second, micros = int(whole), round(fraction * 1e6)
    if micros >= 1_000_000:
        second, micros = second + 1, micros - 1_000_000
    elif micros < 0:
        second, micros = second - 1, micros + 1_000_000
    cached = _last_second  # one read: the pair is replaced whole, never torn between threads
    if cached[0] != second:
        cached = (second, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second)))
        _last_second = cached
    return f"{cached[1]}{micros // 1000:03d}Z"
