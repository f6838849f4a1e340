"""Secrets never print: database URLs, the admin token and credential pass-through properties
(``Secret`` once subclassed ``str``, so an f-string or ``json.dumps`` revealed it)."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

from chronos.config.settings import OPTIONS, Secret, Settings, load, reveal_properties

PASSWORD = 'hunter2-"sasl\\'
URL = "postgresql://chronos:s3cret-db@db.example:5432/chronos"


def test_a_secret_never_prints() -> None:
    secret = Secret(URL)
    assert "s3cret" not in f"{secret}" + str(secret) + repr(secret) + format(secret, "")
    with pytest.raises(TypeError):
        json.dumps({"url": secret})
    assert secret.reveal() == URL
    assert bool(secret) and not Secret("")


def test_settings_and_their_logs_never_show_a_secret(caplog: pytest.LogCaptureFixture) -> None:
    settings = load(
        environ={
            "CHRONOS_DATABASE_URL": URL,
            "CHRONOS_ADMIN_TOKEN": "t0ken-value",
            "CHRONOS_KAFKA__SASL_PASSWORD": PASSWORD,
            "CHRONOS_KAFKA__SASL_USERNAME": "chronos",
        }
    )
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("settings %s / %r", settings, settings)
    shown = repr(settings) + str(settings) + caplog.text
    for secret in ("s3cret-db", "t0ken-value", PASSWORD):
        assert secret not in shown
    assert isinstance(settings.kafka_properties["sasl.password"], Secret)
    assert settings.kafka_properties["sasl.username"] == "chronos"
    assert reveal_properties(settings.kafka_properties)["sasl.password"] == PASSWORD


def test_every_setting_is_declared_once_as_a_field() -> None:
    fields = [f.name for f in dataclasses.fields(Settings) if "option" in f.metadata]
    assert [o.name for o in OPTIONS] == fields
    assert {o.name for o in OPTIONS if o.secret} == {
        "database_url",
        "migration_database_url",
        "admin_token",
        "admin_read_token",
    }


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_secret_inside_a_library_error_is_redacted_from_every_log_line(
    fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver or the Kafka client may echo a URL or a property in its own error text: the
    log output replaces every secret the node holds with ***, tracebacks included."""
    import io

    from chronos.config.settings import secret_values
    from chronos.observability import logs

    settings = load(
        environ={
            "CHRONOS_DATABASE_URL": URL,
            "CHRONOS_KAFKA_BOOTSTRAP_SERVERS": "k:9092",
            "CHRONOS_KAFKA__SASL_PASSWORD": PASSWORD,
            "CHRONOS_ADMIN_TOKEN": "token-abcdef",
        }
    )
    secrets = secret_values(settings)
    assert {URL, "s3cret-db", PASSWORD, "token-abcdef"} <= set(secrets)
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.configure("INFO", fmt, secrets=secrets)
        log = logging.getLogger(f"chronos.test_redaction.{fmt}")
        log.error("SASL authentication error: bad password %s for chronos", PASSWORD)
        try:
            raise RuntimeError(
                f"connection to server failed: password 's3cret-db' rejected ({URL})"
            )
        except RuntimeError:
            log.exception("cannot connect")
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    out = stream.getvalue()
    assert "***" in out
    for secret in (PASSWORD, "s3cret-db", "token-abcdef"):
        assert secret not in out, out


def test_a_refused_secret_is_named_without_its_value(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A secret setting whose value is refused stops start-up naming it, never printing it (the
    URL's password)."""
    from chronos import cli

    monkeypatch.setenv("CHRONOS_DATABASE_URL", URL)
    monkeypatch.setenv("CHRONOS_MIGRATION_DATABASE_URL", "mysql://chronos:s3cret-m@db/chronos")
    assert cli.main(["migrate"]) == 2
    err = capsys.readouterr().err
    assert "CHRONOS_MIGRATION_DATABASE_URL" in err and "postgresql://" in err
    assert "s3cret" not in err
