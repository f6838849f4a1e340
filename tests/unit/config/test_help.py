"""A command line that fits on a screen: every command's ``--help`` is at most 60 lines and shows
its own options; every setting stays a flag of the commands that take it (``--help-all`` shows
them) and is listed by the one full listing, ``chronos settings``; defaults, variables and
allowed values are written one way. In-process, on the real parser."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest

from chronos import cli
from chronos.config import flags
from chronos.config.settings import KAFKA_PASSTHROUGH_PREFIXES, OPTIONS

MAX_LINES = 60
SERVER_COMMANDS = ("run", "migrate", "check", "dev")


@pytest.fixture(autouse=True)
def _a_terminal_of_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps help to the terminal's width


def command_paths(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """``()`` (chronos itself), then every command and subcommand (``admin``, ``admin get``…)."""
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from command_paths(sub, (*path, name))


COMMANDS = list(command_paths(cli._parser()))


def help_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_the_walk_finds_every_command() -> None:
    assert {(), ("run",), ("settings",), ("admin",), ("admin", "get"), ("admin", "replay")} <= set(
        COMMANDS
    )
    assert len(COMMANDS) > 25


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(("chronos", *p)))
def test_every_help_fits_a_screen(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_of([*path, "--help"], capsys)
    lines = text.rstrip("\n").splitlines()
    assert len(lines) <= MAX_LINES, f"chronos {' '.join(path)} --help: {len(lines)} lines"


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(("chronos", *p)))
def test_defaults_and_variables_are_written_one_way(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    text = " ".join(help_of([*path, "--help"], capsys).split())  # unwrapped
    for old in (r"\[default", r"\[env", r"\(default [^:]", r"\(env CHRONOS_\w+; default"):
        assert re.search(old, text) is None, (path, old)


def test_server_commands_show_their_own_settings(capsys: pytest.CaptureFixture[str]) -> None:
    run = help_of(["run", "--help"], capsys)
    for name in cli.RUN_SHOWN:
        assert ("--" + name.replace("_", "-")) in run, name
    assert "--log-format {text,json}" in run  # the allowed values, not LOG_FORMAT
    assert "(default: 20000; env CHRONOS_HOLD_TIME_MS)" in " ".join(run.split())
    for group in ("Kafka", "Postgres", "timing", "flow", "admin API and HTTP", "observability"):
        assert f"\n{group} settings:" in run, group
    migrate = help_of(["migrate", "--help"], capsys)
    assert "--migration-database-url" in migrate and "--database-url" in migrate
    assert "--timing-advance-ms" not in migrate and "--hold-time-ms" not in migrate
    check = help_of(["check", "--help"], capsys)
    for flag in ("--consumer-group", "--input-topic", "--dead-letter-topic", "--database-url"):
        assert flag in check, flag
    assert "--timing-advance-ms" not in check
    for command in SERVER_COMMANDS:
        text = " ".join(help_of([command, "--help"], capsys).split())
        assert "--help-all" in text and "chronos settings" in text, command


@pytest.mark.parametrize("command", SERVER_COMMANDS)
def test_help_all_shows_every_setting_flag_and_the_parser_takes_each(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = " ".join(help_of([command, "--help-all"], capsys).split())
    for option in OPTIONS:
        assert option.flag in text and option.env in text, option.name
    for prefix in KAFKA_PASSTHROUGH_PREFIXES.values():
        assert prefix in text
    args = cli._parser().parse_args([command, "--timing-advance-ms", "7", "--log-format", "JSON"])
    assert (args.timing_advance_ms, args.log_format) == ("7", "JSON")


@pytest.mark.parametrize(
    "path",
    [p for p in COMMANDS if p and p[0] in ("schedule", "reschedule", "cancel", "tail")],
    ids=" ".join,
)
def test_help_all_of_a_kafka_command_shows_the_settings_its_help_leaves_out(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    short = help_of([*path, "--help"], capsys)
    full = help_of([*path, "--help-all"], capsys)
    assert "--kafka-oauth-provider" not in short
    for flag in ("--kafka-oauth-provider", "--log-level", "--log-format", "--consumer-property"):
        assert flag in full, flag


def test_the_settings_listing_has_every_setting(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["settings"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for option in OPTIONS:
        assert option.flag in text and option.env in text, option.name
        assert f"(default: {flags.shown_default(option)}; env {option.env})" in text, option.name
        if option.choices is not None:
            assert flags.metavar(option) in text, option.name
    for kind, prefix in KAFKA_PASSTHROUGH_PREFIXES.items():
        assert f"--{kind}-property" in text and prefix in text
    positions = [text.index(f"{title} settings:") for title in flags.GROUPS.values()]
    assert positions == sorted(positions)


def test_the_settings_listing_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["settings", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    by_env = {s["env"]: s for s in listed["settings"]}
    assert sorted(by_env) == sorted(o.env for o in OPTIONS)
    for option in OPTIONS:
        entry = by_env[option.env]
        assert entry["flag"] == option.flag and entry["group"] in flags.GROUPS
        default = str(option.default) if isinstance(option.default, timedelta) else option.default
        assert entry["default"] == default and entry["help"] == option.help
        assert entry["choices"] == (list(option.choices) if option.choices else None)
    assert [p["env_prefix"] for p in listed["passthrough"]] == list(
        KAFKA_PASSTHROUGH_PREFIXES.values()
    )


def test_the_listing_needs_no_valid_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CHRONOS_NOT_A_SETTING", "x")  # refused by every command that loads
    assert cli.main(["settings"]) == 0
    assert "CHRONOS_DATABASE_URL" in capsys.readouterr().out


def test_every_setting_is_declared_in_a_group_the_help_shows() -> None:
    assert {o.group for o in OPTIONS} <= set(flags.GROUPS)


def test_a_command_shows_only_settings_it_takes() -> None:
    with pytest.raises(ValueError, match="unknown settings"):
        flags.add_arguments(argparse.ArgumentParser(), shown=("no_such_setting",))


def test_cancel_and_admin_cancel_say_which_path_they_take(
    capsys: pytest.CaptureFixture[str],
) -> None:
    top = " ".join(help_of(["--help"], capsys).split())
    assert "a record on the input topic" in top and "admin API (HTTP)" in top
    for argv, path, other in (
        (["cancel", "--help"], "input topic", "chronos admin cancel"),
        (["reschedule", "--help"], "input topic", "chronos admin reschedule"),
        (["admin", "cancel", "--help"], "admin API (HTTP)", "chronos cancel"),
        (["admin", "reschedule", "--help"], "admin API (HTTP)", "chronos reschedule"),
    ):
        text = " ".join(help_of(argv, capsys).split())
        assert path in text and other in text, argv
