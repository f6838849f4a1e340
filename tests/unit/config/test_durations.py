"""One grammar for every duration flag (chronos.recurrence.parse_duration, through
chronos.config.flags): ``chronos reschedule ID --in 2h`` and ``chronos admin reschedule ID --in
2h`` alike; ``schedule`` takes its id as ``ID`` or ``--id``."""

from __future__ import annotations

import argparse
import io
from datetime import timedelta
from typing import Any

import pytest

from chronos import cli, produce
from chronos.admin import cli as admin_cli
from chronos.config import flags
from chronos.errors import ConfigError
from chronos.recurrence import parse_duration


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("90", timedelta(seconds=90)),
        ("1.5", timedelta(seconds=1.5)),
        ("500ms", timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("15m", timedelta(minutes=15)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("PT5M", timedelta(minutes=5)),
        (" 2H ", timedelta(hours=2)),
    ],
)
def test_the_forms_of_a_duration(raw: str, expected: timedelta) -> None:
    assert parse_duration(raw) == expected
    assert parse_duration(raw, signed=True) == expected
    assert flags.duration(raw) == expected


@pytest.mark.parametrize("raw", ["", "-1", "-1h", "3x", "nan", "inf", "P1M", "1e20", "5 m", "h"])
def test_what_is_not_a_duration_is_refused_naming_the_forms(raw: str) -> None:
    with pytest.raises(ValueError, match=r"is not a duration: seconds .*2h.*PT5M"):
        parse_duration(raw)
    with pytest.raises(argparse.ArgumentTypeError, match="is not a duration"):
        flags.duration(raw)


def test_a_signed_duration_moves_back_in_time() -> None:
    assert parse_duration("-60", signed=True) == -timedelta(minutes=1)
    assert flags.signed_duration("-1h") == -timedelta(hours=1)
    assert flags.signed_duration("+15m") == timedelta(minutes=15)
    with pytest.raises(argparse.ArgumentTypeError, match="with - for earlier"):
        flags.signed_duration("--1h")


def _parse(*argv: str) -> argparse.Namespace:
    return cli._parser().parse_args(list(argv))


@pytest.mark.parametrize(
    "argv",
    [
        ["schedule", "--in", "2h"],
        ["reschedule", "m1", "--in", "2h"],
        ["admin", "reschedule", "m1", "--in", "2h"],
    ],
    ids=" ".join,
)
def test_both_reschedule_commands_take_the_same_in(argv: list[str]) -> None:
    assert _parse(*argv).delay == timedelta(hours=2)


def test_every_duration_flag_takes_the_grammar() -> None:
    args = _parse("schedule", "--every", "15m", "--expires", "30s")
    assert (args.every, args.expires) == (timedelta(minutes=15), timedelta(seconds=30))
    bulk = ("admin", "reschedule", "--tenant", "a")
    assert _parse(*bulk, "--shift=-1h").shift == -timedelta(hours=1)
    assert _parse(*bulk, "--shift", "-90").shift == timedelta(seconds=-90)
    assert _parse("admin", "stats", "--timeout", "500ms").timeout == 0.5
    assert _parse("admin", "stats", "--timeout", "3").timeout == 3.0


def test_a_bad_duration_exits_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["admin", "reschedule", "m1", "--in", "2x"], ["schedule", "--every", "soon"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 2
        err = capsys.readouterr().err
        assert argv[-2] in err and "not a duration" in err


class Recording:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, params: Any = None, body: Any = None) -> Any:
        self.sent.append((method, path, body))
        return {"action": "reschedule", "rescheduled": 1, "complete": True}

    def reschedule(
        self, message_id: str, *, deadline: Any = None, delay_ms: int | None = None
    ) -> Any:
        self.sent.append(("reschedule", message_id, delay_ms))
        return {"id": message_id}


def test_admin_reschedule_in_2h_sends_its_milliseconds() -> None:
    client = Recording()
    args = _parse("admin", "reschedule", "m1", "--in", "2h")
    admin_cli.ACTIONS["reschedule"](client, args, io.StringIO())  # type: ignore[arg-type]
    assert client.sent == [("reschedule", "m1", 7_200_000)]
    bulk = _parse("admin", "reschedule", "--tenant", "acme", "--shift=-1m")
    admin_cli.ACTIONS["reschedule"](client, bulk, io.StringIO())  # type: ignore[arg-type]
    assert client.sent[-1] == ("POST", "/bulk/reschedule", {"shift_ms": -60_000})


def test_schedule_takes_its_id_as_an_argument_or_as_id() -> None:
    assert produce.schedule_id(_parse("schedule", "invoice-7", "--in", "1h")) == "invoice-7"
    assert produce.schedule_id(_parse("schedule", "--in", "1h", "invoice-7")) == "invoice-7"
    assert produce.schedule_id(_parse("schedule", "--id", "invoice-7")) == "invoice-7"
    assert produce.schedule_id(_parse("schedule", "x", "--id", "x")) == "x"
    assert produce.schedule_id(_parse("schedule")) is None
    with pytest.raises(ConfigError, match="two ids"):
        produce.schedule_id(_parse("schedule", "a", "--id", "b"))
