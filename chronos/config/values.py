"""The value types of settings: ``Secret`` (credentials), ``Option`` (one setting's CLI flag and
environment variable) and the parsers that check a raw value and name what is wrong with it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from chronos.recurrence import parse_duration

ENV_PREFIX = "CHRONOS_"
# librdkafka properties pass through to the Kafka clients: CHRONOS_KAFKA__SECURITY_PROTOCOL sets
# security.protocol for every client (see chronos.config.settings).
KAFKA_PASSTHROUGH_PREFIXES = {
    "kafka": "CHRONOS_KAFKA__",
    "consumer": "CHRONOS_CONSUMER__",
    "producer": "CHRONOS_PRODUCER__",
}


class Secret:
    """A secret string (database URLs and passwords): ``str()``, ``repr()``, f-strings and log
    lines show ``***``, ``json.dumps`` refuses it; only ``reveal()`` gives the value."""

    __slots__ = ("_value",)

    def __init__(self, value: str = "") -> None:
        self._value = str(value)

    def reveal(self) -> str:
        return self._value

    def __str__(self) -> str:
        return "***"

    def __repr__(self) -> str:
        return "Secret('***')"

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


# librdkafka pass-through properties whose values are credentials: kept as Secret.
SECRET_PROPERTY_WORDS = ("password", "secret", "sasl.oauthbearer.config", "ssl.key.pem")


def is_secret_property(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_PROPERTY_WORDS)


def reveal_properties(props: Mapping[str, str | Secret]) -> dict[str, str]:
    """Pass-through properties as the Kafka clients take them (secrets revealed)."""
    return {k: v.reveal() if isinstance(v, Secret) else v for k, v in props.items()}


@dataclass(frozen=True)
class Option:
    name: str
    default: Any
    help: str
    parse: Callable[[str], Any] = str
    secret: bool = False
    choices: Sequence[str] | None = None
    group: str = ""  # its subject on the command line (chronos.config.flags.GROUPS)
    metavar: str | None = None  # the flag's value in --help (None: derived from the name)

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


class Duration(timedelta):
    """A duration setting's value: a ``timedelta`` written back as people write one (``7d``,
    ``12h``, ``90m``, ``30s``, ``0``), so its default reads and parses as any other value."""

    def __str__(self) -> str:
        ms = self // timedelta(milliseconds=1)
        if ms == 0:
            return "0"
        for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
            if ms % size == 0:
                return f"{ms // size}{unit}"
        return f"{ms}ms"


def _duration(text: str) -> Duration:
    """A duration in the one grammar of every duration (``chronos.recurrence.parse_duration``:
    90, 1.5, 500ms, 30s, 5m, 2h, 1d, PT5M); 0 is allowed (off)."""
    value = parse_duration(text)
    return Duration(seconds=value.total_seconds())


TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


def _boolean(text: str) -> bool:
    """A yes-or-no setting: true or false (also 1/0, yes/no, on/off; any case, so that the
    ``True`` a ``Settings`` writes back, ``as_environment``, reads as it was)."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ValueError("must be true or false")


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError("must be a positive integer")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be zero or a positive integer")
    return value


def _niceness(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 19:
        raise ValueError("must be between 0 (the node's priority) and 19 (the lowest)")
    return value


def _non_empty(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text


def _batch_size(text: str) -> int:
    value = _positive_int(text)
    if value > 1_000_000:
        raise ValueError("must be at most 1,000,000 (the Kafka client's limit)")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError("must be a TCP port between 0 and 65535 (0 disables)")
    return value


def _port_or_shared(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError("must be a TCP port between 0 and 65535 (0: the HTTP port's)")
    return value


def _uuid_or_random(text: str) -> str:
    if text == "":
        return str(uuid.uuid4())
    return str(uuid.UUID(text))


def _topic(text: str) -> str:
    if not text:
        raise ValueError("must not be empty")
    if len(text) > 249 or any(not (c.isalnum() or c in "._-") for c in text):
        raise ValueError("must be a Kafka topic name (ASCII letters, digits, '.', '_', '-')")
    return text


def _topic_patterns(text: str) -> str:
    patterns = [p.strip() for p in text.split(",") if p.strip()]
    for pattern in patterns:
        if len(pattern) > 249 or any(not (c.isalnum() or c in "._-*?[]!") for c in pattern):
            raise ValueError(f"{pattern!r} is not a glob pattern of Kafka topic names")
    return ",".join(patterns)


def _optional_topic(text: str) -> str:
    return "" if text == "" else _topic(text)


POSTGRES_URL_PREFIXES = ("postgresql://", "postgres://", "postgresql+psycopg://")
