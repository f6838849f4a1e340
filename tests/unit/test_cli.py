"""The CLI refuses bad settings before doing anything: exit status 2 and a message naming them.

In-process (``chronos.cli.main``), covering every validated option for both the flag and the
environment variable; ``tests/e2e`` checks the same through real subprocesses.
"""

from __future__ import annotations

import os

import pytest

from chronos import cli
from chronos.config.settings import OPTIONS, Option
from tests.unit.config.option_values import VALIDATED, bad_value

DB = "postgresql://chronos@127.0.0.1:1/none"  # never reached: start-up stops first


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("CHRONOS_"):
            monkeypatch.delenv(key)


@pytest.mark.parametrize("command", ["run", "migrate"])
@pytest.mark.parametrize("option", VALIDATED, ids=lambda o: o.name)
def test_bad_flag_exits_2_naming_it(
    command: str, option: Option, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = bad_value(option)
    assert bad is not None
    assert cli.main([command, "--database-url", DB, f"{option.flag}={bad}"]) == 2
    err = capsys.readouterr().err
    assert "configuration error" in err
    assert option.flag in err


@pytest.mark.parametrize("option", VALIDATED, ids=lambda o: o.name)
def test_bad_env_value_exits_2_naming_it(
    option: Option, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = bad_value(option)
    assert bad is not None
    monkeypatch.setenv("CHRONOS_DATABASE_URL", DB)
    monkeypatch.setenv(option.env, bad)
    assert cli.main(["run"]) == 2
    assert option.env in capsys.readouterr().err


def test_hold_time_abc(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.main(["run", "--hold-time-ms", "abc"]) == 2
    assert "--hold-time-ms" in capsys.readouterr().err
    monkeypatch.setenv("CHRONOS_HOLD_TIME_MS", "abc")
    assert cli.main(["run"]) == 2
    assert "CHRONOS_HOLD_TIME_MS" in capsys.readouterr().err


def test_inconsistent_settings_exit_2_naming_them(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--database-url", DB, "--hold-time-ms", "1000", "--lookahead-ms", "1000"]
    assert cli.main(argv) == 2
    assert "CHRONOS_HOLD_TIME_MS" in capsys.readouterr().err


def test_missing_database_url_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["migrate"]) == 2
    assert "CHRONOS_DATABASE_URL" in capsys.readouterr().err


def test_unknown_variable_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CHRONOS_HOLD_TIMEOUT_MS", "5")
    assert cli.main(["run", "--database-url", DB]) == 2
    assert "CHRONOS_HOLD_TIMEOUT_MS" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "migrate", "check", "dev"])
def test_every_command_accepts_every_setting_flag(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Taken as flags whether --help shows them or not; --help-all shows every one."""
    parser = cli._parser()
    for option in OPTIONS:
        args = parser.parse_args([command, option.flag, "x"])
        assert getattr(args, option.name) == "x", (command, option.flag)
    with pytest.raises(SystemExit):
        cli.main([command, "--help-all"])
    text = capsys.readouterr().out
    for option in OPTIONS:
        assert option.flag in text, (command, option.flag)


@pytest.mark.parametrize(
    ("env", "value"),
    [
        ("CHRONOS_PRODUCER__ENABLE_IDEMPOTENCE", "false"),
        ("CHRONOS_PRODUCER__ACKS", "1"),
        ("CHRONOS_KAFKA__ACKS", "0"),
    ],
)
def test_producer_passthrough_breaking_at_least_once_exits_2_naming_it(
    env: str, value: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(env, value)
    assert cli.main(["run", "--database-url", DB]) == 2
    err = capsys.readouterr().err
    assert env in err and "at-least-once" in err and "Traceback" not in err


@pytest.mark.parametrize("prop", ["enable.idempotence=false", "acks=1", "acks=0"])
def test_producer_property_flag_breaking_at_least_once_exits_2_naming_it(
    prop: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", "--database-url", DB, "--producer-property", prop]) == 2
    err = capsys.readouterr().err
    assert "--producer-property" in err and prop.split("=")[0] in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--statement-timeout-ms", "20000"], "CHRONOS_STATEMENT_TIMEOUT_MS"),
        (["--liveness-timeout-ms", "6000"], "CHRONOS_LIVENESS_TIMEOUT_MS"),
        (["--migration-database-url", "mysql://x"], "--migration-database-url"),
        (["--database-synchronous-commit", "always"], "--database-synchronous-commit"),
    ],
)
def test_new_runtime_settings_are_checked_at_start_up(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["run", "--database-url", DB, *argv]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
