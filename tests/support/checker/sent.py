"""What a fault test sends: Chronos messages (and bad records) carrying a tracking header, each
with what should become of it."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import EllipsisType
from typing import Any

from chronos.protocol import DEADLINE_HEADER, MESSAGE_ID_HEADER, format_deadline, parse_deadline

TRACKING_HEADER = "x-chronos-track"

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class Expectation:
    """What should become of one sent message."""

    deadline_ms: int | None  # the deadline as sent (whole ms); None when it had none/invalid
    dead_letter: bool = False  # True: it must reach the dead-letter topic, not the output


@dataclass(frozen=True)
class Outgoing:
    """One record for the input topic, with its tracking id and expectation."""

    track: str
    key: bytes | None
    value: bytes | None
    headers: Headers  # as sent: Chronos headers and the tracking header included
    expectation: Expectation

    @property
    def relayed_headers(self) -> Headers:
        """The headers Chronos publishes on the output topic (Chronos headers removed)."""
        return [(n, v) for n, v in self.headers if n not in (MESSAGE_ID_HEADER, DEADLINE_HEADER)]


def new_track(prefix: str = "m") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def scheduled(
    deadline: datetime,
    *,
    track: str | None = None,
    message_id: str | None = None,
    key: bytes | EllipsisType | None = ...,
    value: bytes | None = b"value",
    extra_headers: Headers | None = None,
) -> Outgoing:
    """A well-formed Chronos message due at ``deadline`` (sent with millisecond precision).

    The key defaults to the tracking id, so that messages spread over the partitions."""
    track = track or new_track()
    if key is ...:
        key = track.encode()
    text = format_deadline(deadline)
    headers: Headers = [
        (MESSAGE_ID_HEADER, (message_id or track).encode()),
        (DEADLINE_HEADER, text.encode()),
        (TRACKING_HEADER, track.encode()),
        *(extra_headers or []),
    ]
    deadline_ms = round(parse_deadline(text).timestamp() * 1000)
    return Outgoing(track, key, value, headers, Expectation(deadline_ms))


def due_in(seconds: float, **kwargs: Any) -> Outgoing:
    return scheduled(datetime.now(UTC) + timedelta(seconds=seconds), **kwargs)


def raw(
    headers: Headers,
    *,
    dead_letter: bool,
    deadline_ms: int | None = None,
    track: str | None = None,
    key: bytes | None = b"key",
    value: bytes | None = b"value",
) -> Outgoing:
    """A record with exactly ``headers`` (plus the tracking header, appended): for bad input."""
    track = track or new_track("raw")
    return Outgoing(
        track,
        key,
        value,
        [*headers, (TRACKING_HEADER, track.encode())],
        Expectation(deadline_ms, dead_letter),
    )


def expectations(messages: Iterable[Outgoing]) -> dict[str, Expectation]:
    return {m.track: m.expectation for m in messages}
