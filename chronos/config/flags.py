"""The settings on the command line, and the conventions every command's help shares.

Each setting is a flag of the commands that take it (``add_arguments``), in the group of its
subject (``GROUPS``, named in its declaration). A command's ``--help`` shows the few settings it
is about; the others are still flags of it, hidden: ``--help-all`` shows every flag of the
command, ``chronos settings`` (``listing``) every setting, through the same formatter. A default
and a variable are written one way everywhere, ``(default: 100; env CHRONOS_X)`` (``about``), the
allowed values as ``{text,json}``, and every duration flag takes one grammar (``duration``:
``chronos.recurrence.parse_duration``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from chronos.config.declarations import OPTIONS, OPTIONS_BY_NAME
from chronos.config.values import KAFKA_PASSTHROUGH_PREFIXES, Option
from chronos.recurrence import parse_duration

GROUPS = {
    "kafka": "Kafka",
    "postgres": "Postgres",
    "timing": "timing",
    "flow": "flow",
    "node": "node process",
    "admin": "admin API and HTTP",
    "observability": "observability",
}
"""The subjects of the settings, in the order ``--help`` and ``chronos settings`` show them."""

PASSTHROUGH_FLAGS = tuple(f"{kind}_property" for kind in KAFKA_PASSTHROUGH_PREFIXES)
_CLIENTS = {"kafka": "every Kafka client", "consumer": "the consumers", "producer": "the producers"}
LISTING_HEADER = (
    "Every setting is a CHRONOS_* variable and a flag (flag > environment > default) of chronos "
    "run, migrate, check and dev; the commands that only talk to Kafka take the Kafka ones. "
    "A command's --help-all shows those it takes."
)


# ---------------------------------------------------------------------------------- help text


def value_text(value: object) -> str:
    """A default or an allowed value as written in help: the empty string as ``''``, a yes or no
    as the variable takes it (``true``)."""
    if isinstance(value, bool):
        return str(value).lower()
    return "''" if value == "" else str(value)


def about(default: object = None, env: str | None = None) -> str:
    """The one way a flag's default and variable are written: ``(default: 100; env CHRONOS_X)``
    (either part alone when the other is None)."""
    parts = [] if default is None else [f"default: {value_text(default)}"]
    if env:
        parts.append(f"env {env}")
    return f"({'; '.join(parts)})" if parts else ""


def described(text: str, default: object = None, env: str | None = None) -> str:
    """A flag's help: what it does, then ``about`` its default and variable."""
    return f"{text} {about(default, env)}".rstrip()


def shown_default(option: Option) -> str:
    if option.name == "node_id":
        return "a random UUID"
    if option.secret and option.default:
        return "***"
    return value_text(option.default)


def metavar(option: Option) -> str:
    if option.choices is not None:
        return "{" + ",".join(value_text(c) for c in option.choices) + "}"
    if option.metavar:
        return option.metavar
    if isinstance(option.default, int):
        return "MS" if option.name.endswith("_ms") else "N"
    return option.name.upper().split("_")[-1]


def setting_help(option: Option) -> str:
    return described(option.help, shown_default(option), option.env)


def passthrough_help(kind: str) -> str:
    return (
        f"a librdkafka property of {_CLIENTS[kind]}, repeatable "
        f"(env {KAFKA_PASSTHROUGH_PREFIXES[kind]}<NAME>, the name's dots as _)"
    )


# ---------------------------------------------------------------------------------- flags


class HelpAll(argparse.Action):
    """``--help-all``: the command's help with every flag shown, the settings' it hides too."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        hidden: Sequence[tuple[argparse.Action, str]] = (),
        help: str | None = None,
    ) -> None:
        super().__init__(
            option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help
        )
        self.hidden = tuple(hidden)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        for action, text in self.hidden:
            action.help = text
        parser.epilog = None
        parser.print_help()
        parser.exit()


def add_arguments(
    parser: argparse.ArgumentParser,
    only: Sequence[str] | None = None,
    shown: Sequence[str] | None = None,
) -> None:
    """Add one flag per setting (or per setting named in ``only``) and the Kafka pass-through
    flags, grouped by subject; ``--help`` shows those named in ``shown`` (None: all), the others
    stay flags of the command behind ``--help-all``. A flag keeps its text: ``settings.load``
    parses it, naming the flag when it is wrong."""
    unknown = set(only or ()) - set(OPTIONS_BY_NAME)
    unknown |= set(shown or ()) - set(OPTIONS_BY_NAME) - set(PASSTHROUGH_FLAGS)
    if unknown:
        raise ValueError(f"unknown settings {sorted(unknown)}")
    options = [o for o in OPTIONS if only is None or o.name in only]
    visible = {*(o.name for o in options), *PASSTHROUGH_FLAGS} if shown is None else set(shown)
    hidden: list[tuple[argparse.Action, str]] = []
    for key, title in GROUPS.items():
        members = [o for o in options if o.group == key]
        kinds = list(KAFKA_PASSTHROUGH_PREFIXES) if key == "kafka" else []
        if not members and not kinds:
            continue
        group = parser.add_argument_group(f"{title} settings")
        flags = [(o.flag, o.name, metavar(o), setting_help(o), "store") for o in members]
        flags += [(f"--{k}-property", f"{k}_property", "NAME=VALUE", passthrough_help(k), "append")
                  for k in kinds]  # fmt: skip
        for flag, dest, value, text, kind in flags:
            action = group.add_argument(
                flag,
                dest=dest,
                default=None,
                metavar=value,
                action=kind,
                help=text if dest in visible else argparse.SUPPRESS,
            )
            if dest not in visible:
                hidden.append((action, text))
    if hidden:
        parser.add_argument(
            "--help-all",
            action=HelpAll,
            hidden=hidden,
            help=f"show the flags of the {len(hidden)} other settings too",
        )
        parser.epilog = parser.epilog or (
            f"{len(hidden)} more settings are flags of this command (--help-all shows them). "
            "Every setting, its variable, default and allowed values: chronos settings."
        )


# ---------------------------------------------------------------------------------- listing


def listing() -> str:
    """Every setting, grouped, as ``--help-all`` shows them: ``chronos settings``."""
    parser = argparse.ArgumentParser(
        prog="chronos settings",
        usage=argparse.SUPPRESS,
        description=LISTING_HEADER,
        add_help=False,
    )
    add_arguments(parser)
    return parser.format_help()


def listing_json() -> dict[str, Any]:
    """Every setting as data: ``chronos settings --json``."""
    return {
        "settings": [
            {
                "name": o.name,
                "env": o.env,
                "flag": o.flag,
                "group": o.group,
                # JSON has no duration: one is written as its setting is (7d, 12h, 0).
                "default": "" if o.secret else _plain(o.default),
                "choices": list(o.choices) if o.choices is not None else None,
                "secret": o.secret,
                "help": o.help,
            }
            for key in GROUPS
            for o in OPTIONS
            if o.group == key
        ],
        "passthrough": [
            {
                "env_prefix": prefix,
                "flag": f"--{kind}-property",
                "group": "kafka",
                "help": passthrough_help(kind),
            }
            for kind, prefix in KAFKA_PASSTHROUGH_PREFIXES.items()
        ],
    }


# ---------------------------------------------------------------------------------- durations


def duration(raw: str) -> timedelta:
    """A duration flag's value (``chronos.recurrence.parse_duration``: 90, 1.5, 500ms, 30s, 5m,
    2h, 1d, PT5M), or argparse's error naming the forms."""
    try:
        return parse_duration(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def signed_duration(raw: str) -> timedelta:
    """``duration`` with a sign: ``-60``, ``-1h`` (as ``--shift=-1h``) move back in time."""
    try:
        return parse_duration(raw, signed=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def seconds(raw: str) -> float:
    """``duration`` in seconds, for a flag that waits (``--timeout``)."""
    return duration(raw).total_seconds()


def _plain(value: Any) -> Any:
    """A default as JSON holds it: a duration as its text (``7d``), anything else as is."""
    return str(value) if isinstance(value, timedelta) else value
