"""The node's stores, one per shard (``chronos.config.shards``): opened alike from the settings,
by the node (its firing lanes, the admin API) and by its intake process (the batches it
routes)."""

from __future__ import annotations

from chronos.config.settings import Settings
from chronos.config.shards import ShardMap, layout
from chronos.store.postgres.store import PostgresStore


def shard_layout(settings: Settings) -> tuple[list[str], ShardMap]:
    """The shards' database URLs (shard 0 first) and the map of the input partitions."""
    return layout(settings.database_url.reveal(), settings.shard_map)


def open_stores(settings: Settings) -> list[PostgresStore]:
    """A store per shard, as a node's loops use them (connections are opened on first use)."""
    urls, _ = shard_layout(settings)
    return [
        PostgresStore(
            url,
            application_name=f"chronos-{settings.node_id[:8]}",
            statement_timeout_ms=settings.effective_statement_timeout_ms,
            tcp_timeout_ms=settings.database_tcp_timeout_ms,
            synchronous_commit=settings.database_synchronous_commit,
            history=bool(settings.history_ttl),
            shard=shard if len(urls) > 1 else None,
        )
        for shard, url in enumerate(urls)
    ]
