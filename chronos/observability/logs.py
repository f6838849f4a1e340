"""Logging set-up: plain text or one JSON object per line with the stable ``event`` name."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD:
                payload[key] = value
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


# Control characters (and Unicode line breaks) in a text log line could forge lines or
# terminal escapes: a message id is producer-chosen text. Escape them as Python would.
_ESCAPES = {
    code: ascii(chr(code))[1:-1]
    for code in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)
}


def escape(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\x1b``, ...)."""
    return text.translate(_ESCAPES)


class TextFormatter(logging.Formatter):
    """One line per record: the message (with its arguments) has control characters escaped;
    a traceback, written by the logging code itself, keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape(record.message)
        return super().formatMessage(record)


class _NodeFilter(logging.Filter):
    """Gives every record the node id (``node``) unless it names one already."""

    def __init__(self, node: str) -> None:
        super().__init__()
        self.node = node

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "node"):
            record.node = self.node
        return True


class RedactingFormatter(logging.Formatter):
    """Another formatter's lines with every secret replaced by ``***``: a secret that reaches a
    message through a library's error text (a URL in a driver's exception, a property echoed
    by the Kafka client) never reaches the log."""

    def __init__(self, inner: logging.Formatter, secrets: Sequence[str]) -> None:
        super().__init__()
        self.inner = inner
        self.secrets = secret_forms(secrets)

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record), self.secrets)


def secret_forms(secrets: Sequence[str]) -> list[str]:
    """Each secret as written, and as JSON writes it (a quote or backslash in a password is
    escaped), longest first: what ``redact`` is given for output that may be JSON."""
    forms = {form for s in secrets for form in (s, json.dumps(s)[1:-1])}
    return sorted(forms, key=len, reverse=True)


def redact(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def configure(
    level: str = "INFO",
    fmt: str = "text",
    node: str | None = None,
    secrets: Sequence[str] = (),
) -> None:
    """Log to stderr; with ``node``, every record carries that node id (the JSON field
    ``node``; in text, after the thread name); ``secrets`` never appear (``***``)."""
    handler = logging.StreamHandler(sys.stderr)
    if node is not None:
        handler.addFilter(_NodeFilter(node))
    formatter: logging.Formatter
    if fmt == "json":
        formatter = JsonFormatter()
    else:
        where = "[%(threadName)s node=%(node)s]" if node is not None else "[%(threadName)s]"
        formatter = TextFormatter(f"%(asctime)s %(levelname)-7s %(name)s {where} %(message)s")
    handler.setFormatter(RedactingFormatter(formatter, secrets) if secrets else formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


class Throttle:
    """At most one line per ``every`` seconds for a repeated failure: the first at once, then
    one a period (the others go to DEBUG; ``suppressed`` counts them)."""

    def __init__(self, every: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.every = every
        self.clock = clock
        self._last = -every
        self.suppressed = 0

    def level(self, level: int = logging.WARNING) -> int:
        """The level to log this occurrence at (``level`` when its turn has come)."""
        now = self.clock()
        if now - self._last >= self.every:
            self._last = now
            self.suppressed = 0
            return level
        self.suppressed += 1
        return logging.DEBUG


class ThrottleFilter(logging.Filter):
    """Lets a repeated WARNING-or-worse line through once per ``every`` seconds per kind (the
    first word of the message: librdkafka's facility, such as ``FAIL`` or ``REQTMOUT``), so a
    broker away for minutes is not logged by every client on every reconnect."""

    MAX_KINDS = 256

    def __init__(self, every: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every = every
        self.clock = clock
        self.kinds: dict[str, Throttle] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        kind = record.getMessage().split(" ", 1)[0][:32]
        throttle = self.kinds.get(kind)
        if throttle is None:
            if len(self.kinds) >= self.MAX_KINDS:
                self.kinds.clear()
            throttle = self.kinds[kind] = Throttle(self.every, self.clock)
        return throttle.level() != logging.DEBUG
