"""Creating topics on an embedded broker (``chronos dev``, the test suite, the benchmark): the
brokers run with ``auto.create.topics.enable=false``, as production usually does, so whoever
uses a topic creates it first."""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from chronos.errors import ChronosError


def admin_client(bootstrap: str, client: Mapping[str, str] | None = None) -> AdminClient:
    """An admin client for ``bootstrap`` (``client``: more librdkafka settings, e.g. TLS)."""
    return AdminClient(
        {
            "bootstrap.servers": bootstrap,
            "socket.connection.setup.timeout.ms": 5000,
            **(client or {}),
        }
    )


def create_topics(
    bootstrap: str,
    topics: Mapping[str, int],
    timeout: float = 30.0,
    client: Mapping[str, str] | None = None,
    *,
    replication: int = 1,
    config: Mapping[str, str] | None = None,
) -> None:
    """Create ``{name: partitions}`` with ``replication`` copies and topic ``config``; topics
    that already exist are fine. Returns once every topic has a leader for each partition."""
    if not topics:
        return
    admin = admin_client(bootstrap, client)
    futures = admin.create_topics(
        [
            NewTopic(
                name,
                num_partitions=n,
                replication_factor=replication,
                config=dict(config or {}),
            )
            for name, n in topics.items()
        ],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    for name, future in futures.items():
        try:
            future.result(timeout=timeout)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ChronosError(f"cannot create topic {name!r}: {error.str()}") from exc
    deadline = time.monotonic() + timeout
    while True:
        known = admin.list_topics(timeout=timeout).topics
        if all(_led(known.get(name), topics[name]) for name in topics):
            return
        if time.monotonic() > deadline:
            missing = sorted(n for n in topics if not _led(known.get(n), topics[n]))
            raise ChronosError(f"topics {missing} did not appear on {bootstrap}")
        time.sleep(0.1)


def _led(meta: object, partitions: int) -> bool:
    """Whether a topic's metadata shows at least ``partitions`` partitions, each with a leader."""
    if meta is None or getattr(meta, "error", None) is not None:
        return False
    held = getattr(meta, "partitions", {})
    return len(held) >= partitions and all(p.leader >= 0 for p in held.values())
