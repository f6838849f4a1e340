"""The delivery checker of the fault suite: what was sent against what came out.

Every message a test sends carries an ordinary header, ``TRACKING_HEADER``, with a unique
tracking id. Chronos relays every non-Chronos header byte-exact (to the output topic, and to the
dead-letter topic with the reason added), so each output or dead-letter record names the message
it came from; output records do not carry ``chronosMessageId``.

``check`` reads the output and dead-letter topics from the beginning (``assign()``, never a
consumer group; the embedded broker's ListOffsets high watermark is wrong, so it polls until
every expected message was seen and then a quiet period, or until a timeout) and ``analyse``
compares them with the sent set:

* **lost**: sent, expected somewhere, seen on neither topic;
* **misrouted**: seen, but on the other topic than expected (a message due to fire that was
  dead-lettered, or one due for the dead-letter topic that was fired);
* **duplicated**: seen more than once (both topics together), with the count;
* **early**: fired before ``deadline - timing advance`` by more than 1 ms (the record timestamp
  is the fire time, truncated to whole milliseconds by the producer);
* **late**: statistics of ``fire time - deadline`` over the first copy of each fired message;
* **dead-lettered**: each dead-lettered message with its ``chronosDeadLetterReason``.

``python -m tests.support.checker [DIR]`` prints the fault-suite table of docs/benchmark-results.md
from the result files the fault suite writes (``.chronos/reliability/<scenario>.json`` by default).

The parts: ``sent`` (what a test sends), ``sending`` (producing it), ``reading`` (reading the
topics back), ``analysis`` (comparing the two), ``results`` (the scenario files and the table).
"""

from __future__ import annotations

from tests.support.checker.analysis import (
    TIMESTAMP_TOLERANCE_MS,
    LateStats,
    Observation,
    Report,
    analyse,
    header,
)
from tests.support.checker.reading import LiveReader, TopicReader, check
from tests.support.checker.results import RESULTS_DIR, ScenarioResult, record_result, render_table
from tests.support.checker.sending import Load, send
from tests.support.checker.sent import (
    TRACKING_HEADER,
    Expectation,
    Headers,
    Outgoing,
    due_in,
    expectations,
    new_track,
    raw,
    scheduled,
)

__all__ = [
    "RESULTS_DIR",
    "TIMESTAMP_TOLERANCE_MS",
    "TRACKING_HEADER",
    "Expectation",
    "Headers",
    "LateStats",
    "LiveReader",
    "Load",
    "Observation",
    "Outgoing",
    "Report",
    "ScenarioResult",
    "TopicReader",
    "analyse",
    "check",
    "due_in",
    "expectations",
    "header",
    "new_track",
    "raw",
    "record_result",
    "render_table",
    "scheduled",
    "send",
]
