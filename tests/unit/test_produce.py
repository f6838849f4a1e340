"""The producer's commands (chronos.produce): their flags, what they write (through the client,
parsed back by the protocol), their help (their own options, not a node's settings) and tail's
timestamps. tests/e2e/test_producer_cli_e2e.py runs them against the real broker and a node."""

from __future__ import annotations

import argparse
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chronos import cli, client, produce
from chronos.config.settings import OPTIONS
from chronos.protocol import Action, ScheduledMessage, parse_record, topic_policy
from chronos.recurrence import Rule, decode


def _args(command: str, *argv: str) -> argparse.Namespace:
    return cli._parser().parse_args([command, *argv])


class Recording:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None:
        self.records.append((topic, kwargs))


def _parsed(kwargs: dict[str, Any]) -> ScheduledMessage:
    result = parse_record(
        kwargs["key"], kwargs["value"], kwargs["headers"], topic_allowed=topic_policy("o", "t*")
    )
    assert isinstance(result, ScheduledMessage), result
    return result


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("5", timedelta(seconds=5)),
        ("1.5", timedelta(seconds=1.5)),
        ("500ms", timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("PT5M", timedelta(minutes=5)),
        ("p1dt1s", timedelta(days=1, seconds=1)),
    ],
)
def test_durations(raw: str, expected: timedelta) -> None:
    assert produce.duration(raw) == expected


@pytest.mark.parametrize("raw", ["", "-1", "3x", "nan", "inf", "P1M", "1e20", "5 m"])
def test_bad_durations_are_refused(raw: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
        produce.duration(raw)


def test_instants_and_expiry() -> None:
    assert produce.instant("2030-01-02T03:04:05") == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert produce.instant("2030-01-02T04:04:05+01:00") == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert produce.expiry("30s") == timedelta(seconds=30)
    assert produce.expiry("2030-01-02T03:04:05Z") == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    with pytest.raises(argparse.ArgumentTypeError):
        produce.expiry("soon")


def test_schedule_flags_write_every_header_and_parse_back() -> None:
    args = _args(
        "schedule",
        "--at",
        "2030-05-01T12:00:00Z",
        "--every",
        "90s",
        "--until",
        "2031-01-01T00:00:00Z",
        "--missed",
        "all",
        "--expires",
        "PT10S",
        "--tenant",
        "acme",
        "--topic",
        "t1",
        "--header",
        "a=1",
        "--header",
        "a=2=3",
        "--key",
        "k",
        "--value",
        "v",
    )
    p = Recording()
    client.schedule(p, message_id="m", **produce.message_kwargs(args))
    m = _parsed(p.records[0][1])
    assert (m.id, m.key, m.value, m.tenant, m.target_topic) == ("m", b"k", b"v", "acme", "t1")
    assert m.headers == [("a", b"1"), ("a", b"2=3")]
    assert m.deadline == datetime(2030, 5, 1, 12, tzinfo=UTC)
    rule = decode(m.recurrence or "")
    assert (rule.every_ms, rule.until) == (90_000, datetime(2031, 1, 1, tzinfo=UTC))
    assert m.expires_ms == 10_000


def test_a_cron_series_in_a_time_zone_needs_no_start() -> None:
    args = _args("schedule", "--cron", "0 9 * * 1-5", "--time-zone", "Europe/Paris")
    kwargs = produce.message_kwargs(args)
    assert (kwargs["deadline"], kwargs["delay"]) == (None, None)
    p = Recording()
    client.schedule(p, **kwargs)
    rule = decode(_parsed(p.records[0][1]).recurrence or "")
    assert rule == Rule(cron="0 9 * * 1-5", zone="Europe/Paris")


def test_without_a_time_a_message_is_due_in_five_seconds() -> None:
    kwargs = produce.message_kwargs(_args("schedule"))
    assert kwargs["delay"] == timedelta(seconds=5) and kwargs["deadline"] is None


def test_reschedule_takes_the_time_options() -> None:
    args = _args("reschedule", "abc", "--in", "2m", "--tenant", "t")
    p = Recording()
    client.reschedule(p, message_id=args.id, **produce.message_kwargs(args))
    m = _parsed(p.records[0][1])
    assert (m.id, m.action, m.tenant) == ("abc", Action.RESCHEDULE, "t")
    assert m.deadline > datetime.now(UTC) + timedelta(seconds=110)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["schedule", "--time-zone", "Europe/Paris"], "--time-zone"),
        (["schedule", "--until", "2031-01-01T00:00:00Z"], "--until"),
        (["schedule", "--cron", "* *"], "--cron"),
        (["schedule", "--cron", "0 9 * * *", "--time-zone", "Nowhere/Else"], "--time-zone"),
        (["schedule", "--every", "100ms"], "--every"),
        (["schedule", "--in", "5", "--tenant", ""], "tenant"),
        (["schedule", "--header", "chronosTenant=x"], "tenant="),
        (["reschedule", "x", "--in", "5", "--header", "chronosTopic=x"], "chronosTopic"),
    ],
)
def test_bad_values_exit_2_naming_the_flag(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*argv, "--kafka-bootstrap-servers", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["schedule", "--in", "3x"],
        ["schedule", "--at", "tomorrow"],
        ["schedule", "--at", "2030-01-01T00:00:00Z", "--in", "5"],
        ["schedule", "--every", "5s", "--cron", "* * * * *"],
        ["schedule", "--header", "novalue"],
        ["cancel"],
    ],
)
def test_bad_flags_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert "error" in capsys.readouterr().err


NODE_ONLY = [o.flag for o in OPTIONS if o.name in ("database_url", "hold_time_ms", "admin_token")]


@pytest.mark.parametrize(
    "command",
    [
        ["schedule"],
        ["reschedule"],
        ["cancel"],
        ["tail"],
        ["import"],
        ["admin", "list"],
        ["admin", "cancel"],
        ["admin", "stats"],
    ],
)
def test_producer_and_admin_help_shows_only_their_own_options(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        cli.main([*command, "--help"])
    text = capsys.readouterr().out
    for flag in NODE_ONLY:
        assert flag not in text, (command, flag)
    flags = [line for line in text.splitlines() if line.strip().startswith("--")]
    assert len(flags) < 30, (command, len(flags))
    if command[0] != "admin":  # they talk to Kafka: its connection settings stay
        for flag in ("--kafka-bootstrap-servers", "--kafka-property", "--producer-property"):
            assert flag in text, (command, flag)


def test_a_node_setting_still_comes_from_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a flag of schedule, but CHRONOS_DELIVERY_TIMEOUT_MS still applies (and is checked)."""
    monkeypatch.setenv("CHRONOS_DELIVERY_TIMEOUT_MS", "abc")
    assert cli.main(["schedule", "--kafka-bootstrap-servers", "127.0.0.1:1"]) == 2


def test_tail_prints_the_records_own_timestamp_and_lateness() -> None:
    """A record produced 50 ms before its scheduled instant reads as 50 ms early, not late."""
    due = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)
    ms = round(due.timestamp() * 1000) - 50
    headers: list[tuple[str, bytes | None]] = [
        ("x", b"1"),
        ("chronosScheduledFor", b"2030-01-01T12:00:00.000Z"),
    ]
    line = produce.describe_timestamp(1, ms, headers, "chronosScheduledFor")
    assert line == "2030-01-01T11:59:59.950Z CreateTime lateness=-50ms"
    line = produce.describe_timestamp(2, ms + 145, headers, "chronosScheduledFor")
    assert line == "2030-01-01T12:00:00.095Z LogAppendTime lateness=+95ms"
    assert produce.describe_timestamp(1, ms, headers, "") == "2030-01-01T11:59:59.950Z CreateTime"
    assert produce.describe_timestamp(0, -1, headers, "chronosScheduledFor") == "no-timestamp"


def test_tail_audit_needs_the_audit_topic(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["tail", "--audit", "--kafka-bootstrap-servers", "127.0.0.1:1"]) == 2
    assert "CHRONOS_AUDIT_TOPIC" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["tail", "--audit", "--dead-letter"])
    assert exit_.value.code == 2


def test_importing_the_client_leaves_the_database_stack_out() -> None:
    """A producer application imports chronos.client without the node's dependencies."""
    code = (
        "import sys\n"
        "import chronos.client\n"
        "heavy = {'sqlalchemy', 'psycopg', 'alembic', 'prometheus_client', 'confluent_kafka'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


BLOCK_NODE_STACK = (
    "import sys\n"
    "for name in ('psycopg', 'sqlalchemy', 'alembic'):\n"
    "    sys.modules[name] = None  # as if the `node` extra were not installed\n"
    "from chronos import cli\n"
)


def test_the_producer_commands_work_without_the_node_extra() -> None:
    code = BLOCK_NODE_STACK + (
        "import contextlib, io\n"
        "for argv in (['schedule', '--help'], ['tail', '--help'], ['admin', 'replay', '--help']):\n"
        "    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "        cli.main(argv)\n"
        "print(cli.main(['run']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2"
    assert "pip install 'chronos-scheduler[node]'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # the metadata request's 10 s timeout
@pytest.mark.parametrize("argv", [["tail"], ["admin", "dead-letters"]])
def test_an_unreachable_broker_is_said_with_status_1(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*argv, "--kafka-bootstrap-servers", "127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert "Kafka at 127.0.0.1:1" in err and "Traceback" not in err


def test_what_is_printed_is_what_is_sent(capsys: pytest.CaptureFixture[str]) -> None:
    from chronos.config.settings import load

    args = _args("schedule", "--in", "30s", "--count", "2", "--id", "x", "--every", "1h")
    p = Recording()
    config = load(args, environ={})
    assert produce._produce("schedule", config, args, p, lambda _e, _m: None) == 2
    lines = capsys.readouterr().out.splitlines()
    for (topic, kwargs), line, expected_id in zip(p.records, lines, ["x-0", "x-1"], strict=True):
        m = _parsed(kwargs)
        assert (topic, m.id) == ("chronos-input", expected_id)
        from chronos.protocol import format_deadline

        assert line == (
            f"scheduled {expected_id} on chronos-input for {format_deadline(m.deadline)} "
            "repeating every 1:00:00"
        )
    assert produce._produce("cancel", config, _args("cancel", "x-0"), p, lambda _e, _m: None) == 1
    assert _parsed(p.records[-1][1]).action == Action.CANCEL


def test_tail_reads_the_scheduled_instant_where_chronos_relays_it() -> None:
    """chronos dev's nodes relay it under chronosScheduledFor: tail reads it there unless
    CHRONOS_RELAY_DEADLINE_HEADER names another header."""
    from chronos.config.settings import load

    assert produce.scheduled_header(load(environ={})) == "chronosScheduledFor"
    configured = load(environ={"CHRONOS_RELAY_DEADLINE_HEADER": "firedFor"})
    assert produce.scheduled_header(configured) == "firedFor"
