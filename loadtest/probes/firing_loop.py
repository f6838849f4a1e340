"""One node's real firing loop (``FiringLoop`` on ``PostgresStore``, default settings but the
claim batch) against a test publisher, for the probes that leave the broker out
(``firing_cost``, ``fair_firing_lateness``)."""

from __future__ import annotations

import threading
from typing import Any

from chronos.config.settings import Secret, Settings, load
from chronos.config.validation import validate
from chronos.firing.loop import FiringLoop
from chronos.kafka import Publisher
from chronos.store import PostgresStore
from chronos.testing import unfenced


def probe_settings(url: str = "postgresql://unused", **overrides: Any) -> Settings:
    """A node's default settings on ``url`` (the topics are never used by the probes)."""
    values: dict[str, Any] = {
        "database_url": Secret(url),
        "input_topic": "in",
        "output_topic": "out",
        "dead_letter_topic": "dlq",
        "http_port": 0,
    }
    return validate(load(environ={}, **{**values, **overrides}))


def firing_loop(
    url: str, claim_batch_size: int, publisher: Publisher, **overrides: Any
) -> tuple[FiringLoop, PostgresStore, threading.Thread]:
    """The loop, its store and the (not yet started) thread that runs it (``overrides``: more
    settings)."""
    settings = probe_settings(url, claim_batch_size=claim_batch_size, **overrides)
    store = PostgresStore(url)
    loop = FiringLoop(settings, store, publisher, unfenced(settings.node_id))
    return loop, store, threading.Thread(target=loop.run, daemon=True)
