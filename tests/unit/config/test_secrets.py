"""Secrets never print: database URLs, the admin token and credential pass-through properties
(``Secret`` once subclassed ``str``, so an f-string or ``json.dumps`` revealed it)."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest

from chronos.config.settings import OPTIONS, Secret, Settings, load, reveal_properties

PASSWORD = "hunter2-sasl"
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
    }
