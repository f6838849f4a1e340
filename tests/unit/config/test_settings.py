"""Settings: every knob has a default, a CHRONOS_* variable and a CLI flag; bad values stop start-up
with a message naming the setting."""

from __future__ import annotations

import argparse
import uuid
from typing import Any

import pytest

from chronos import cli
from chronos.config.settings import (
    KAFKA_PASSTHROUGH_PREFIXES,
    OPTIONS,
    Option,
    Secret,
    Settings,
    add_arguments,
    as_environment,
    load,
)
from chronos.config.validation import validate
from chronos.errors import ConfigError
from chronos.kafka import consumer_config, producer_config
from tests.unit.config.option_values import DB, VALIDATED, alternative, bad_value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser


def _args(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(list(argv))


def _valid(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"database_url": Secret(DB)}
    values.update(overrides)
    return load(environ={}, **values)


# ------------------------------------------------------------------------ one declaration each


def test_every_option_has_an_env_var_and_a_flag_named_after_it() -> None:
    names = [o.name for o in OPTIONS]
    assert len(names) == len(set(names))
    for option in OPTIONS:
        assert option.env == "CHRONOS_" + option.name.upper()
        assert option.flag == "--" + option.name.replace("_", "-")


def test_the_design_knobs_exist_with_their_defaults() -> None:
    defaults = _valid()
    assert defaults.timing_advance_ms == 50
    # Above lookahead + delivery timeout (15 s: a broker's death at Kafka's default fencing is
    # ridden out, not timed out) + poll interval; a dead node is taken over after the liveness
    # window, not the hold time.
    assert defaults.hold_time_ms == 20000
    assert defaults.delivery_timeout_ms == 15000
    assert defaults.liveness_window_ms == 5000
    assert defaults.poll_interval_ms == 100
    assert defaults.failure_detection_interval_ms == 500
    for name in ("database_url", "kafka_bootstrap_servers", "input_topic", "output_topic"):
        assert any(o.name == name for o in OPTIONS), name


def test_run_help_all_shows_every_flag_with_its_env_var(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--help shows the settings run is about, --help-all every one (see test_help.py)."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "--help-all"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for option in OPTIONS:
        assert option.flag in text
        assert option.env in text
    for prefix in KAFKA_PASSTHROUGH_PREFIXES.values():
        assert prefix in text


def plain(value: Any) -> Any:
    """A setting's value as parsed (a secret's revealed)."""
    return value.reveal() if isinstance(value, Secret) else value


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.name)
def test_each_setting_is_read_from_its_env_var(option: Option) -> None:
    text, parsed = alternative(option)
    environ = {"CHRONOS_DATABASE_URL": DB, option.env: text}
    value = getattr(load(environ=environ), option.name)
    assert isinstance(value, Secret) == option.secret
    assert plain(value) == parsed


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.name)
def test_each_setting_is_read_from_its_flag_which_beats_the_env(option: Option) -> None:
    text, parsed = alternative(option)
    environ = {"CHRONOS_DATABASE_URL": DB, option.env: str(option.default)}
    value = getattr(load(_args(option.flag, text), environ=environ), option.name)
    assert isinstance(value, Secret) == option.secret
    assert plain(value) == parsed


def test_defaults_apply_when_nothing_is_set() -> None:
    settings = load(environ={})
    for option in OPTIONS:
        if option.name == "node_id":
            assert uuid.UUID(settings.node_id)
            continue
        expected = option.parse(str(option.default))
        assert plain(getattr(settings, option.name)) == expected


def test_node_ids_are_random_per_process_unless_set() -> None:
    assert load(environ={}).node_id != load(environ={}).node_id
    fixed = str(uuid.uuid4())
    assert load(environ={"CHRONOS_NODE_ID": fixed}).node_id == fixed


# ------------------------------------------------------------------------ bad values


@pytest.mark.parametrize("option", VALIDATED, ids=lambda o: o.name)
def test_bad_env_value_names_the_variable(option: Option) -> None:
    bad = bad_value(option)
    assert bad is not None
    with pytest.raises(ConfigError) as raised:
        load(environ={option.env: bad})
    assert option.env in str(raised.value)


@pytest.mark.parametrize("option", VALIDATED, ids=lambda o: o.name)
def test_bad_flag_value_names_the_flag(option: Option) -> None:
    bad = bad_value(option)
    assert bad is not None
    with pytest.raises(ConfigError) as raised:
        load(_args(option.flag, bad), environ={})
    assert option.flag in str(raised.value)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("hold_time_ms", "abc"),
        ("hold_time_ms", "0"),
        ("hold_time_ms", "-5"),
        ("timing_advance_ms", "-1"),
        ("poll_interval_ms", "0"),
        ("http_port", "70000"),
        ("input_topic", ""),
        ("output_topic", "with space"),
        ("node_id", "not-a-uuid"),
        ("log_level", "chatty"),
        ("history_fired", "maybe"),
    ],
)
def test_known_bad_values_are_refused(name: str, value: str) -> None:
    option = next(o for o in OPTIONS if o.name == name)
    with pytest.raises(ConfigError, match=option.env):
        load(environ={option.env: value})


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("False", False), ("0", False), ("yes", True), (" OFF ", False)],
)
def test_a_yes_or_no_setting_reads_the_usual_words(text: str, value: bool) -> None:
    assert _valid().history_fired is True
    assert load(environ={"CHRONOS_HISTORY_FIRED": text}).history_fired is value


def test_unknown_chronos_variable_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"CHRONOS_HOLD_TIME\b"):
        load(environ={"CHRONOS_HOLD_TIME": "5000"})
    load(environ={"CHRONOS_TEST_ANYTHING": "x", "OTHER": "y"})  # not settings: ignored


@pytest.mark.parametrize("command", [["check"], ["run"], ["migrate"], ["tail"]])
def test_a_shell_set_up_for_the_admin_cli_loads_every_commands_settings(
    command: list[str],
) -> None:
    """docs/operations.md exports the admin CLI's variables; every other command still runs."""
    env = {
        "CHRONOS_ADMIN_URL": "http://127.0.0.1:8080",
        "CHRONOS_ADMIN_TOKEN": "t0ken-of-the-node",
        "CHRONOS_DATABASE_URL": DB,
    }
    config = load(cli._parser().parse_args(command), environ=env)
    validate(config)
    assert config.admin_token is not None and config.admin_token.reveal() == "t0ken-of-the-node"


def test_validate_requires_a_postgres_url() -> None:
    with pytest.raises(ConfigError, match="CHRONOS_DATABASE_URL"):
        validate(load(environ={}))
    with pytest.raises(ConfigError, match="CHRONOS_DATABASE_URL"):
        validate(load(environ={"CHRONOS_DATABASE_URL": "mysql://x/y"}))
    validate(load(environ={}), require_database=False)


def test_validate_keeps_the_hold_time_beyond_what_a_healthy_node_needs() -> None:
    ok = _valid(hold_time_ms=3000, lookahead_ms=500, delivery_timeout_ms=1000, poll_interval_ms=100)
    assert validate(ok) is ok
    with pytest.raises(ConfigError, match="CHRONOS_HOLD_TIME_MS"):
        validate(
            _valid(
                hold_time_ms=1600, lookahead_ms=500, delivery_timeout_ms=1000, poll_interval_ms=100
            )
        )


def test_validate_refuses_shared_topics() -> None:
    with pytest.raises(ConfigError, match="CHRONOS_INPUT_TOPIC"):
        validate(_valid(input_topic="same", output_topic="same"))
    with pytest.raises(ConfigError, match="CHRONOS_DEAD_LETTER_TOPIC"):
        validate(_valid(dead_letter_topic="chronos-output"))
    validate(_valid(dead_letter_topic=""))  # dead-lettering off is allowed


def test_the_audit_topic_is_off_by_default_and_never_a_topic_of_the_messages() -> None:
    assert _valid().audit_topic == ""
    for topic in ("chronos-input", "chronos-output", "chronos-dead-letter"):
        with pytest.raises(ConfigError, match="CHRONOS_AUDIT_TOPIC"):
            validate(_valid(audit_topic=topic))
    assert validate(_valid(audit_topic="chronos-audit")).audit_topic == "chronos-audit"
    assert cli.main(["run", "--audit-topic", "bad topic!"]) == 2


# ------------------------------------------------------------------------ secrets, passthrough


def test_secrets_never_show_in_repr() -> None:
    settings = _valid(admin_token=Secret("tok3n"))
    assert "s3cret" not in repr(settings)
    assert "tok3n" not in repr(settings)
    assert settings.database_url.reveal() == DB
    assert isinstance(load(environ={"CHRONOS_DATABASE_URL": DB}).database_url, Secret)


def test_kafka_properties_pass_through_from_env_and_flags() -> None:
    environ = {
        "CHRONOS_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "CHRONOS_CONSUMER__SESSION_TIMEOUT_MS": "6000",
        "CHRONOS_PRODUCER__LINGER_MS": "7",
    }
    args = _args("--kafka-property", "client.rack=r1", "--producer-property", "linger.ms=9")
    settings = load(args, environ=environ)
    assert settings.kafka_properties == {"security.protocol": "SASL_SSL", "client.rack": "r1"}
    assert settings.consumer_properties == {"session.timeout.ms": "6000"}
    assert settings.producer_properties == {"linger.ms": "9"}  # the flag beats the env
    consumer = consumer_config(settings)
    producer = producer_config(settings, "firing")
    assert consumer["security.protocol"] == "SASL_SSL"
    assert consumer["session.timeout.ms"] == "6000"
    assert producer["linger.ms"] == "9"
    assert "session.timeout.ms" not in producer


def test_bad_property_flag_is_refused() -> None:
    with pytest.raises(ConfigError, match="--kafka-property"):
        load(_args("--kafka-property", "no-equals-sign"), environ={})


def test_as_environment_reproduces_the_settings() -> None:
    settings = _valid(
        hold_time_ms=4321,
        history_fired=False,  # a yes or no written back as Python writes it (False)
        consumer_properties={"session.timeout.ms": "6000"},
        producer_properties={"linger.ms": "5"},
    )
    assert load(environ=as_environment(settings)) == settings


# ------------------------------------------------------------------------ Kafka client safety


@pytest.mark.parametrize(
    ("variable", "setting"),
    [
        ("CHRONOS_PRODUCER__DELIVERY_TIMEOUT_MS", "CHRONOS_DELIVERY_TIMEOUT_MS"),
        ("CHRONOS_KAFKA__MESSAGE_TIMEOUT_MS", "CHRONOS_DELIVERY_TIMEOUT_MS"),
        ("CHRONOS_KAFKA__BOOTSTRAP_SERVERS", "CHRONOS_KAFKA_BOOTSTRAP_SERVERS"),
        ("CHRONOS_KAFKA__METADATA_BROKER_LIST", "CHRONOS_KAFKA_BOOTSTRAP_SERVERS"),
        ("CHRONOS_CONSUMER__GROUP_ID", "CHRONOS_CONSUMER_GROUP"),
        ("CHRONOS_CONSUMER__GROUP_INSTANCE_ID", "CHRONOS_GROUP_INSTANCE_ID"),
        ("CHRONOS_CONSUMER__GROUP_PROTOCOL", "CHRONOS_GROUP_PROTOCOL"),
    ],
)
def test_a_passthrough_that_overrides_a_setting_is_refused(variable: str, setting: str) -> None:
    """CHRONOS_PRODUCER__DELIVERY_TIMEOUT_MS=600000 would replace the validated delivery timeout
    (the hold time would no longer cover it): refused, naming the property and the setting."""
    env = {"CHRONOS_DATABASE_URL": DB, variable: "600000"}
    with pytest.raises(ConfigError, match=rf"{variable}.*{setting}"):
        validate(load(environ=env))


def test_a_property_flag_that_overrides_a_setting_is_refused() -> None:
    args = cli._parser().parse_args(["run", "--producer-property", "Delivery.Timeout.Ms=600000"])
    with pytest.raises(ConfigError, match=r"--producer-property.*CHRONOS_DELIVERY_TIMEOUT_MS"):
        validate(load(args, environ={"CHRONOS_DATABASE_URL": DB}))


@pytest.mark.parametrize("name", ["LINGER_MS", "QUEUE_BUFFERING_MAX_MS"])
def test_a_linger_the_delivery_timeout_cannot_hold_is_refused(name: str) -> None:
    """librdkafka refuses a producer whose linger is not below its delivery timeout: refused at
    start naming both, not an exception when the first producer is made."""
    env = {"CHRONOS_DATABASE_URL": DB, "CHRONOS_DELIVERY_TIMEOUT_MS": "1000"}
    validate(load(environ={**env, f"CHRONOS_PRODUCER__{name}": "999"}))
    validate(load(environ={**env, f"CHRONOS_PRODUCER__{name}": "0.5"}))
    with pytest.raises(
        ConfigError, match=rf"CHRONOS_PRODUCER__{name}.*CHRONOS_DELIVERY_TIMEOUT_MS"
    ):
        validate(load(environ={**env, f"CHRONOS_PRODUCER__{name}": "1000"}))
    with pytest.raises(ConfigError, match=rf"CHRONOS_KAFKA__{name}"):
        validate(load(environ={**env, f"CHRONOS_KAFKA__{name}": "soon"}))


def test_max_publish_attempts_fits_the_attempts_column() -> None:
    """attempts is a smallint and a row is parked after 2 x max_publish_attempts: beyond 16,383
    the release would fail "out of range" for ever."""
    assert validate(_valid(max_publish_attempts=16383))
    with pytest.raises(ConfigError, match=r"CHRONOS_MAX_PUBLISH_ATTEMPTS.*16383"):
        validate(_valid(max_publish_attempts=16384))


def test_a_refused_passthrough_exits_2_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CHRONOS_DATABASE_URL", DB)
    monkeypatch.setenv("CHRONOS_PRODUCER__DELIVERY_TIMEOUT_MS", "600000")
    assert cli.main(["run"]) == 2
    assert "CHRONOS_PRODUCER__DELIVERY_TIMEOUT_MS" in capsys.readouterr().err


def test_producer_is_idempotent_acks_all_java_partitioner_and_bounded() -> None:
    settings = _valid(delivery_timeout_ms=1234, producer_properties={"acks": "all"})
    conf = producer_config(settings, "firing")
    assert conf["enable.idempotence"] is True
    assert conf["acks"] == "all"
    assert conf["partitioner"] == "murmur2_random"  # what the Java client does with keys
    assert conf["delivery.timeout.ms"] == 1234
    assert conf["bootstrap.servers"] == settings.kafka_bootstrap_servers


def test_consumer_never_stores_offsets_automatically_even_if_asked() -> None:
    settings = _valid(consumer_group="g1", consumer_properties={"enable.auto.offset.store": "true"})
    conf = consumer_config(settings)
    assert conf["enable.auto.offset.store"] is False
    assert conf["group.id"] == "g1"


# ------------------------------------------------------------------------ refused up front
# Values the Kafka client refuses (or crashes on) only once the node runs must stop start-up
# instead, with a message naming the setting.


@pytest.mark.parametrize(
    ("env", "value"),
    [
        # librdkafka aborts the whole process on an empty group.id (an assertion in the client).
        ("CHRONOS_CONSUMER_GROUP", ""),
        # Consumer.consume() refuses num_messages above 1,000,000: the intake loop would die.
        ("CHRONOS_CONSUME_BATCH_SIZE", "1000001"),
    ],
)
def test_values_the_kafka_client_cannot_take_are_refused_at_start_up(env: str, value: str) -> None:
    with pytest.raises(ConfigError, match=env):
        validate(load(environ={"CHRONOS_DATABASE_URL": DB, env: value}))
