"""A node's settings: loaded from CLI flags, CHRONOS_* environment variables and defaults.

Precedence: CLI flag > environment variable > default. Each setting is declared once, in
``chronos.config.declarations``; this module loads them (``load``), hands them to another
process (``as_environment``) and re-exports the declarations, the value types and the flags
(``add_arguments``, from ``chronos.config.flags``: each command's settings flags and help).

Arbitrary librdkafka properties pass through to the Kafka clients:

* ``CHRONOS_KAFKA__<NAME>`` (all clients), ``CHRONOS_CONSUMER__<NAME>``,
  ``CHRONOS_PRODUCER__<NAME>``:
  ``<NAME>`` is the property with dots written as single underscores, e.g.
  ``CHRONOS_KAFKA__SECURITY_PROTOCOL=SASL_SSL`` sets ``security.protocol``.
* ``--kafka-property NAME=VALUE`` (repeatable), ``--consumer-property``, ``--producer-property``.

See docs/configuration.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from chronos.config.declarations import OPTIONS, OPTIONS_BY_NAME, Settings, setting
from chronos.config.flags import add_arguments
from chronos.config.validation import AT_LEAST_ONCE_PRODUCER, MIN_LIVENESS_WINDOW_MS
from chronos.config.values import (
    ENV_PREFIX,
    KAFKA_PASSTHROUGH_PREFIXES,
    POSTGRES_URL_PREFIXES,
    SECRET_PROPERTY_WORDS,
    Option,
    Secret,
    is_secret_property,
    reveal_properties,
)
from chronos.errors import ConfigError

# Re-exported: the declarations and the value types are part of this module's interface.
__all__ = [
    "ADMIN_URL_ENV",
    "AT_LEAST_ONCE_PRODUCER",
    "CLIENT_VARIABLES",
    "ENV_PREFIX",
    "KAFKA_CLIENT_SETTINGS",
    "KAFKA_PASSTHROUGH_PREFIXES",
    "MIN_LIVENESS_WINDOW_MS",
    "OPTIONS",
    "OPTIONS_BY_NAME",
    "POSTGRES_URL_PREFIXES",
    "SECRET_PROPERTY_WORDS",
    "Option",
    "Secret",
    "Settings",
    "add_arguments",
    "as_environment",
    "is_secret_property",
    "load",
    "passthrough_env",
    "reveal_properties",
    "secret_values",
    "setting",
]

# Variables of Chronos's own client commands, not node settings: known to the loader so that a
# shell set up for them runs every other command too.
ADMIN_URL_ENV = "CHRONOS_ADMIN_URL"  # the node the admin CLI talks to
CLIENT_VARIABLES = frozenset({ADMIN_URL_ENV})


def _parse_option(option: Option, raw: str, source: str) -> Any:
    if option.choices is not None:
        normalised = option.parse(raw)
        if normalised not in option.choices:
            raise ConfigError(
                f"{source}={raw!r} is invalid: expected one of {', '.join(option.choices)}"
            )
        return normalised
    try:
        value = option.parse(raw)
    except ValueError as exc:
        given = (
            f"{source} (a secret: its value not shown)" if option.secret else f"{source}={raw!r}"
        )
        raise ConfigError(f"{given} is invalid: {exc}") from None
    return Secret(value) if option.secret else value


def _passthrough_from_env(environ: Mapping[str, str], prefix: str) -> dict[str, str | Secret]:
    props: dict[str, str | Secret] = {}
    for key, value in environ.items():
        if key.startswith(prefix) and len(key) > len(prefix):
            name = key[len(prefix) :].lower().replace("_", ".")
            props[name] = Secret(value) if is_secret_property(name) else value
    return props


def _passthrough_from_flags(items: Sequence[str] | None, flag: str) -> dict[str, str | Secret]:
    props: dict[str, str | Secret] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(
                f"{flag} {item.partition('=')[0]!r}=... is invalid: expected NAME=VALUE"
            )
        props[name.strip()] = Secret(value) if is_secret_property(name) else value
    return props


# The settings of a command that only talks to Kafka (schedule, cancel, reschedule, tail,
# import, the dead-letter commands): the connection (with the pass-through properties for TLS
# and SASL) and the log; each command adds the topics it uses. Every other setting is still read
# from its CHRONOS_* variable, but is not a flag of these commands.
KAFKA_CLIENT_SETTINGS = (
    "kafka_bootstrap_servers",
    "kafka_oauth_provider",
    "log_level",
    "log_format",
)


def load(
    args: argparse.Namespace | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Build Settings from CLI args, the environment and defaults (in that precedence).

    Raises ConfigError naming the offending flag or variable.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for option in OPTIONS:
        flag_value = getattr(args, option.name, None) if args is not None else None
        if option.name in overrides:
            values[option.name] = overrides[option.name]
        elif flag_value is not None:
            values[option.name] = _parse_option(option, flag_value, option.flag)
        elif option.env in env:
            values[option.name] = _parse_option(option, env[option.env], option.env)
        else:
            values[option.name] = _parse_option(option, str(option.default), option.env)
    for kind, prefix in KAFKA_PASSTHROUGH_PREFIXES.items():
        props = _passthrough_from_env(env, prefix)
        flag_items = getattr(args, f"{kind}_property", None) if args is not None else None
        props.update(_passthrough_from_flags(flag_items, f"--{kind}-property"))
        values[f"{kind}_properties"] = overrides.get(f"{kind}_properties", props)
    unknown = [
        key
        for key in env
        if key.startswith(ENV_PREFIX)
        and not any(key.startswith(p) for p in KAFKA_PASSTHROUGH_PREFIXES.values())
        and key[len(ENV_PREFIX) :].lower() not in OPTIONS_BY_NAME
        and key not in CLIENT_VARIABLES
        and not key.startswith(("CHRONOS_TEST_", "CHRONOS_DEV_", "CHRONOS_FAULT_"))
    ]
    if unknown:
        raise ConfigError(
            f"unknown setting {sorted(unknown)[0]}: known settings are "
            + ", ".join(o.env for o in OPTIONS)
        )
    return Settings(**values)


def secret_values(settings: Settings) -> list[str]:
    """Every secret a node holds, revealed, longest first: the database URLs and their
    passwords, the admin token, the secret pass-through properties. Log output replaces them
    with ``***`` wherever they appear, even inside a client library's error text."""
    from urllib.parse import unquote, urlsplit

    found: set[str] = set()
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        secrets = value.values() if isinstance(value, Mapping) else [value]
        for secret in secrets:
            if isinstance(secret, Secret) and secret.reveal():
                found.add(secret.reveal())
                if field.name.endswith("database_url"):
                    try:
                        password = urlsplit(secret.reveal()).password
                    except ValueError:
                        password = None
                    if password:
                        found |= {password, unquote(password)}
    return sorted((s for s in found if len(s) >= 4), key=len, reverse=True)


def passthrough_env(name: str, kind: str = "kafka") -> str:
    """The variable that sets librdkafka property ``name`` for ``kind`` of client
    (``security.protocol`` -> ``CHRONOS_KAFKA__SECURITY_PROTOCOL``)."""
    return KAFKA_PASSTHROUGH_PREFIXES[kind] + name.upper().replace(".", "_")


def as_environment(settings: Settings) -> dict[str, str]:
    """The CHRONOS_* environment that reproduces ``settings`` in another process."""
    env: dict[str, str] = {}
    for option in OPTIONS:
        value = getattr(settings, option.name)
        env[option.env] = value.reveal() if isinstance(value, Secret) else str(value)
    for kind in KAFKA_PASSTHROUGH_PREFIXES:
        for name, value in getattr(settings, f"{kind}_properties").items():
            revealed = value.reveal() if isinstance(value, Secret) else value
            env[passthrough_env(name, kind)] = revealed
    return env
