"""The broker's state as the node sees it: a metadata request for the output topic every few
seconds, on a thread of its own, feeding ``chronos.observability.dependencies.KAFKA`` (its log
lines and ``chronos_dependency_up{dependency="kafka"}``). Loops retry their own calls whatever
it says; it only tells people."""

from __future__ import annotations

import threading

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from chronos.config.settings import Settings
from chronos.kafka.config import admin_config
from chronos.observability.dependencies import KAFKA

PROBE_INTERVAL_S = 2.0
PROBE_TIMEOUT_S = 3.0


class BrokerProbe:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chronos-broker-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        admin = AdminClient(admin_config(self.settings))
        while not self._stop.wait(PROBE_INTERVAL_S):
            self.probe(admin)

    def probe(self, admin: AdminClient) -> bool:
        try:
            admin.list_topics(topic=self.settings.output_topic, timeout=PROBE_TIMEOUT_S)
        except KafkaException as exc:
            KAFKA.failed(exc)
            return False
        KAFKA.succeeded()
        return True
