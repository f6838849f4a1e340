"""CHRONOS_ADMIN_PORT: off by default (the admin API on the HTTP port), otherwise a port of its own
that must differ from the HTTP port; a bad value stops the node with exit status 2, naming it."""

from __future__ import annotations

import pytest

from chronos import cli
from chronos.config.settings import OPTIONS_BY_NAME, Secret, load
from chronos.config.validation import validate
from chronos.errors import ConfigError
from tests.unit.config.option_values import DB


def test_off_by_default_so_one_port_serves_everything_as_before() -> None:
    assert OPTIONS_BY_NAME["admin_port"].default == 0
    assert validate(load(environ={}, database_url=Secret(DB))).admin_port == 0


def test_a_port_of_its_own_is_accepted() -> None:
    loaded = validate(load(environ={"CHRONOS_ADMIN_PORT": "8081"}, database_url=Secret(DB)))
    assert (loaded.http_port, loaded.admin_port) == (8080, 8081)


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({"CHRONOS_ADMIN_PORT": "8080"}, "must differ from CHRONOS_HTTP_PORT"),
        ({"CHRONOS_ADMIN_PORT": "9000", "CHRONOS_HTTP_PORT": "9000"}, "must differ"),
        ({"CHRONOS_ADMIN_PORT": "8081", "CHRONOS_HTTP_PORT": "0"}, "needs the HTTP server"),
        ({"CHRONOS_ADMIN_PORT": "65536"}, "between 0 and 65535"),
        ({"CHRONOS_ADMIN_PORT": "-1"}, "between 0 and 65535"),
        ({"CHRONOS_ADMIN_PORT": "admin"}, "invalid"),
    ],
)
def test_bad_values_are_refused_naming_the_setting(environ: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        validate(load(environ=environ, database_url=Secret(DB)))
    assert "CHRONOS_ADMIN_PORT" in str(raised.value)
    assert says in str(raised.value)


def test_chronos_run_exits_2_on_a_bad_admin_port(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CHRONOS_DATABASE_URL", DB)
    monkeypatch.setenv("CHRONOS_ADMIN_PORT", "8080")
    assert cli.main(["run"]) == 2
    assert "CHRONOS_ADMIN_PORT" in capsys.readouterr().err
