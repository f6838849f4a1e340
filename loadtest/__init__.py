"""Chronos load-test harness: an open-loop producer, an output recorder and a Spark analysis.

``python -m loadtest run`` drives a Chronos deployment through its Kafka topics and records every
message sent and received as Parquet; ``python -m loadtest analyze`` turns a results directory into
``summary.json`` and ``report.html``. See ``loadtest/README.md``.
"""

from __future__ import annotations

__all__: list[str] = []
