"""Node settings pointing at the test services."""

from __future__ import annotations

from typing import Any

from chronos.config.settings import Secret, Settings, load
from chronos.config.validation import validate
from tests.support.kafka import Topics


def make_settings(database_url: str, bootstrap: str, topics: Topics, **overrides: Any) -> Settings:
    """Validated settings for one node; the environment is ignored, HTTP is off by default.

    ``overrides`` take typed values (e.g. ``hold_time_ms=2000``), as ``Settings.replace``.
    """
    values: dict[str, Any] = {
        "database_url": Secret(database_url),
        "kafka_bootstrap_servers": bootstrap,
        "input_topic": topics.input,
        "output_topic": topics.output,
        "dead_letter_topic": topics.dead_letter,
        "consumer_group": f"{topics.input}-group",
        "http_port": 0,
    }
    values.update(overrides)
    return validate(load(environ={}, **values))
