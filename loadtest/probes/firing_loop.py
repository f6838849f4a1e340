"""One node's real firing loop (``FiringLoop`` on ``PostgresStore``, default settings but the
claim batch) against a test publisher, for the probes that leave the broker out
(``firing_cost``, ``fair_firing_lateness``)."""

from __future__ import annotations

import threading

from chronos.config.settings import Secret, load
from chronos.firing.loop import FiringLoop
from chronos.kafka import Publisher
from chronos.store import PostgresStore
from chronos.testing import unfenced


def firing_loop(
    url: str, claim_batch_size: int, publisher: Publisher
) -> tuple[FiringLoop, PostgresStore, threading.Thread]:
    """The loop, its store and the (not yet started) thread that runs it."""
    settings = load(
        environ={},
        database_url=Secret(url),
        input_topic="in",
        output_topic="out",
        dead_letter_topic="dlq",
        http_port=0,
        claim_batch_size=claim_batch_size,
    ).validate()
    store = PostgresStore(url)
    loop = FiringLoop(settings, store, publisher, unfenced(settings.node_id))
    return loop, store, threading.Thread(target=loop.run, daemon=True)
