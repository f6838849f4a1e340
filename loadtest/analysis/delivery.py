"""Late or lost: what became of every sent message, and the verdicts drawn from it.

The recorder reads the output topics until ``drain_timeout`` after the last deadline (the
*window*), then, while messages are still missing, for at most ``grace`` more. Every sent
message falls in exactly one class:

* ``on_time``            first output copy received within the window, lateness (fire time -
                         deadline) at most the analysis's jitter limit;
* ``late_in_window``     received within the window, lateness above the limit;
* ``late_after_window``  first output copy received after the window, during the grace: late,
                         not lost (reported with its lateness and how long after the window);
* ``dead_lettered``      never fired, but on the dead-letter topic;
* ``lost``               received on neither topic by the end of the grace.

The Spark analysis (``loadtest.analysis.summary``) computes the figures; this module holds them
as types and turns them into the benchmark's rows, so it needs neither Spark nor the stack.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass(frozen=True, slots=True)
class Delivery:
    """The classes above (they add up to ``sent``) and the lateness of the late ones."""

    sent: int
    on_time: int
    late_in_window: int
    late_after_window: int
    dead_lettered: int
    lost: int
    late_limit_ms: int  # lateness above this is late
    window_end_ms: int | None  # None: the run recorded no window (older runs)
    late_max_ms: int | None = None  # max lateness of every late message (both late classes)
    after_window_lateness_max_ms: int | None = None  # max lateness of those after the window
    after_window_lateness_min_ms: int | None = None
    after_window_max_ms: int | None = None  # latest first receipt, ms after the window end
    after_window_sample: list[str] = field(default_factory=list)

    @property
    def late(self) -> int:
        return self.late_in_window + self.late_after_window

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "late": self.late}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Delivery | None:
        if not data:
            return None
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True, slots=True)
class LossLocation:
    """Where the truly lost messages of a scenario went, checked after its nodes stopped.

    ``still_stored``: rows of the run still in ``chronos_messages`` (accepted and durable, never
    fired: Chronos would still fire them, so they are late beyond the grace, not gone);
    ``output_holes``: offsets missing between the first and last record read from an output
    partition (records the broker acknowledged to Chronos but never served: the embedded
    broker's known limit); ``unexplained``: the rest.
    """

    lost: int
    still_stored: int | None
    output_holes: int | None
    stored_sample: list[str] = field(default_factory=list)

    @property
    def unexplained(self) -> int | None:
        if self.still_stored is None or self.output_holes is None:
            return None
        return max(0, self.lost - self.still_stored - self.output_holes)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "unexplained": self.unexplained}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> LossLocation | None:
        if not data:
            return None
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


STORED_COUNT_SQL = "SELECT count(*) FROM chronos_messages WHERE starts_with(id, %(prefix)s)"
STORED_SAMPLE_SQL = (
    "SELECT id FROM chronos_messages WHERE starts_with(id, %(prefix)s) ORDER BY id LIMIT 10"
)
"""Rows of one run left in the table (``<run id>-<sequence>`` ids; one scan, run only when
messages were lost)."""


def locate_loss(
    lost: int,
    sql: Callable[[str, dict[str, Any]], list[Any]],
    run_id: str,
    output_gaps: Mapping[str, Any] | None,
) -> LossLocation:
    """Look for the lost messages of run ``run_id`` in the table (``sql`` runs a statement on
    the scenario's Postgres) and in the holes of the recorded output offsets."""
    prefix = f"{run_id}-"
    try:
        stored: int | None = int(sql(STORED_COUNT_SQL, {"prefix": prefix})[0][0])
        sample = [str(r[0]) for r in sql(STORED_SAMPLE_SQL, {"prefix": prefix})] if stored else []
    except Exception:  # noqa: BLE001 - a diagnostic; the figures stand without it
        stored, sample = None, []
    holes = None if output_gaps is None else int(output_gaps.get("missing") or 0)
    return LossLocation(lost, stored, holes, sample)


# ----------------------------------------------------------------------------- verdicts


@dataclass(frozen=True, slots=True)
class ScenarioDelivery:
    """One scenario's delivery figures, read back from its ``bench.json`` record."""

    name: str
    lost: int | None
    delivery: Delivery | None
    location: LossLocation | None
    output_holes: int | None

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> ScenarioDelivery:
        summary = rec.get("summary") or {}
        lost = (summary.get("counts") or {}).get("lost")
        holes = (rec.get("output_gaps") or {}).get("missing")
        return cls(
            name=str(rec.get("name")),
            lost=None if lost is None else int(lost),
            delivery=Delivery.from_dict(summary.get("delivery")),
            location=LossLocation.from_dict(rec.get("loss_location")),
            output_holes=None if holes is None else int(holes),
        )

    @property
    def late_after_window(self) -> int:
        return 0 if self.delivery is None else self.delivery.late_after_window


@dataclass(frozen=True, slots=True)
class Row:
    """A row of the benchmark's target table (``pass`` None: reported, not judged)."""

    scenario: str
    target: str
    measured: str
    ok: bool | None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "target": self.target,
            "measured": self.measured,
            "pass": self.ok,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Row:
        return cls(
            str(data["scenario"]),
            str(data["target"]),
            str(data["measured"]),
            data.get("pass"),
            str(data.get("note") or ""),
        )


def _n(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def _s(ms: int | None) -> str:
    return "n/a" if ms is None else f"{ms / 1000:,.1f} s"


def late_text(d: Delivery | None) -> str:
    """``18,000 late after the window (lateness 31.0 s–52.1 s, received up to 12.3 s after it)``,
    or '' when nothing arrived after the window."""  # noqa: RUF002 - the report's en dash
    if d is None or not d.late_after_window:
        return ""
    low, high = _s(d.after_window_lateness_min_ms), _s(d.after_window_lateness_max_ms)
    return (
        f"{_n(d.late_after_window)} late after the window (lateness {low}–{high}, "  # noqa: RUF001
        f"received up to {_s(d.after_window_max_ms)} after it)"
    )


def lost_text(s: ScenarioDelivery) -> str:
    """``3 lost`` plus, when the loss was located, where."""
    text = f"{_n(s.lost)} lost"
    where: list[str] = []
    loc = s.location
    if s.lost and loc is not None:
        if loc.still_stored:
            where.append(f"{loc.still_stored:,} still stored, never fired")
        if loc.output_holes:
            where.append(f"{loc.output_holes:,} output offset holes")
        if loc.unexplained:
            where.append(f"{loc.unexplained:,} unexplained")
    return text + (f" ({', '.join(where)})" if where else "")


def delivery_rows(records: Sequence[Mapping[str, Any]]) -> list[Row]:
    """The loss row over ``records`` (the scenarios judged on loss) and, when messages arrived
    after a window, a reported row for them: late, not lost, so judged by each scenario's own
    lateness or drain target (they are in its lateness figures)."""
    return scenario_delivery_rows([ScenarioDelivery.from_record(r) for r in records])


def scenario_delivery_rows(scenarios: Sequence[ScenarioDelivery]) -> list[Row]:
    """``delivery_rows`` over figures already read."""
    if not scenarios:
        return []
    bad = [s for s in scenarios if s.lost != 0]
    notes = [
        f"{s.name}: {s.output_holes:,} lost are holes in the output topic's offsets (the broker "
        "acknowledged them to Chronos but never served them)"
        for s in bad
        if s.output_holes
    ]
    rows = [
        Row(
            "all",
            "no message lost (saturate, scaling and relay excepted)",
            "none lost" if not bad else ", ".join(f"{s.name}: {lost_text(s)}" for s in bad),
            not bad,
            "; ".join(notes),
        )
    ]
    late = [s for s in scenarios if s.late_after_window]
    if late:
        rows.append(
            Row(
                "all",
                "late, not lost: received after the window, during the grace",
                "; ".join(f"{s.name}: {late_text(s.delivery)}" for s in late),
                None,
                "judged by each scenario's lateness or drain target",
            )
        )
    return rows
