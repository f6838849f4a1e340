"""Topic checks (and optional creation) before a run."""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic


def ensure_topics(
    bootstrap: str,
    topics: list[str],
    *,
    create_partitions: int | None,
    kafka_properties: dict[str, str] | None = None,
    timeout_s: float = 15.0,
) -> dict[str, int]:
    """Return ``{topic: partitions}``; missing topics are created only if ``create_partitions``."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, **(kafka_properties or {})}
    admin = AdminClient(config)
    metadata = admin.list_topics(timeout=timeout_s)
    found: dict[str, int] = {}
    missing: list[str] = []
    for topic in topics:
        info = metadata.topics.get(topic)
        if info is None or info.error is not None or not info.partitions:
            missing.append(topic)
        else:
            found[topic] = len(info.partitions)
    if missing and create_partitions is None:
        raise RuntimeError(
            f"topic(s) {', '.join(missing)} not found on {bootstrap}; create them, "
            "or pass --create-topics PARTITIONS"
        )
    if missing:
        assert create_partitions is not None
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=create_partitions, replication_factor=1) for t in missing]
        )
        for topic, future in futures.items():
            try:
                future.result(timeout_s)
            except Exception as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise RuntimeError(f"creating topic {topic!r} failed: {exc}") from exc
            found[topic] = create_partitions
    return found
