"""What the soak sends: an open-loop mix (``loadtest.harness.mix``) at ``rate`` records per second
for ``duration``, with delays from seconds to hours so that the table holds a standing backlog
while it turns over.

The delays are a mixture of three parts, scaled to the longest delay ``M`` (``--max-delay``,
by default the duration, at most two hours):

* 70 %: 1 s to min(60 s, M) ("seconds");
* 20 %: min(1 min, M/4) to min(10 min, M/2) ("minutes");
* 10 %: min(10 min, M/2) to M ("hours" in a run of an hour or more).

A run of an hour therefore sends delays of 1 s to 1 h (``--max-delay 2h``: to two hours), and
a short run has its long delays scaled down so that they still come due before its drain ends
(a 4-minute run: 1-60 s, 1-2 min, 2-4 min), which the report says (``scaled``). A series
fires ``SERIES_OCCURRENCES`` times, every M / 20 (whole seconds, 1 s to 60 s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loadtest.harness.delays import MixDelay, UniformDelay
from loadtest.harness.mix import Mix

HOUR_S = 3600.0
MAX_DELAY_S = 2 * HOUR_S  # the default longest delay: the duration, at most this
SERIES_OCCURRENCES = 10
SHARES = (70.0, 20.0, 10.0)


def delay_mix(max_delay_s: float) -> MixDelay:
    """The three parts above for a longest delay of ``max_delay_s``."""
    m = round(max_delay_s * 1000)
    if m < 2000:
        raise ValueError("the longest delay must be at least 2 s")
    parts = (
        (1000, min(60_000, m)),
        (min(60_000, m // 4), min(600_000, m // 2)),
        (min(600_000, m // 2), m),
    )
    return MixDelay(
        tuple((share, UniformDelay(lo, hi)) for share, (lo, hi) in zip(SHARES, parts, strict=True))
    )


def series_every_s(max_delay_s: float) -> int:
    """A series' period: its occurrences span half the longest delay, 1 s to 60 s apart."""
    return int(min(60, max(1, max_delay_s // (2 * SERIES_OCCURRENCES))))


@dataclass(frozen=True, slots=True)
class SoakLoad:
    rate: float  # records per second (new messages and follow-ups)
    duration_s: float
    max_delay_s: float
    delay: MixDelay
    mix: Mix

    @classmethod
    def of(
        cls, rate: float, duration_s: float, max_delay_s: float | None = None, tenants: int = 10
    ) -> SoakLoad:
        m = min(duration_s, MAX_DELAY_S) if max_delay_s is None else max_delay_s
        mix = Mix(
            series_every_ms=series_every_s(m) * 1000,
            series_occurrences=SERIES_OCCURRENCES,
            tenants=tenants,
        )
        return cls(rate, duration_s, m, delay_mix(m), mix)

    @property
    def scaled(self) -> bool:
        """The long delays were scaled down below an hour for a short run."""
        return self.max_delay_s < HOUR_S

    def new_message_rate(self) -> float:
        """New messages per second: the records less the follow-ups (a cancel or reschedule for
        about their shares of the messages)."""
        return self.rate / (1 + self.mix.cancel_share + self.mix.reschedule_share)

    def standing_backlog(self) -> int:
        """Rows the table holds once every part of the mix has come due once (Little's law:
        new messages per second x mean delay; series and follow-ups left out)."""
        return round(self.new_message_rate() * self.delay.mean_ms() / 1000)

    def harness_args(self) -> list[str]:
        return [
            "--rate", f"{self.rate:g}",
            "--duration", f"{self.duration_s:g}s",
            "--delay", self.delay.describe(),
            *self.mix.harness_args(),
        ]  # fmt: skip

    def describe(self) -> str:
        scaled = (
            f" (the long delays scaled down to the run: at most {self.max_delay_s:g} s)"
            if self.scaled
            else ""
        )
        return (
            f"{self.rate:,.0f} records/s for {self.duration_s:g} s, delays "
            f"{self.delay.describe()}{scaled}; {self.mix.describe()}; standing backlog about "
            f"{self.standing_backlog():,} rows"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "duration_s": self.duration_s,
            "max_delay_s": self.max_delay_s,
            "delay": self.delay.describe(),
            "delay_mean_s": round(self.delay.mean_ms() / 1000, 1),
            "scaled": self.scaled,
            "standing_backlog_rows": self.standing_backlog(),
            "mix": self.mix.as_dict(),
            "describe": self.describe(),
        }
