"""The console's shards panel in a real headless browser against a live node on two shards'
databases (real Postgres and broker): each shard's database and counts, the map, and a
partition moved by ``chronos shards move`` while the page is open. With one database the panel
stays hidden (tests/e2e/test_console_features.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from chronos import cli
from chronos.config.settings import Secret
from chronos.config.shards import ShardMap
from chronos.store import migrate
from tests.e2e.console_support import READ_TOKEN, TOKEN, Live, Page, ids_of
from tests.support.cluster import Cluster, Table
from tests.support.databases import DatabaseFactory
from tests.support.kafka import delete_topics, new_topics

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]


class EveryShard(Table):
    """The messages of every shard (``Live.schedule`` waits until they are stored)."""

    def __init__(self, urls: list[str]) -> None:
        super().__init__(urls[0])
        self.shards = [Table(url) for url in urls]

    def ids(self) -> set[str]:
        return set().union(*(shard.ids() for shard in self.shards))


@pytest.fixture(scope="module")
def sharded_live(
    database_factory: DatabaseFactory,
    kafka_bootstrap: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Live, list[str]]]:
    urls = [database_factory.create_migrated() for _ in range(2)]
    for shard, url in enumerate(urls):
        migrate.record_shard(url, shard, ShardMap(2))
    topics = new_topics(kafka_bootstrap, "console-shards")
    cluster = Cluster(" ".join(urls), kafka_bootstrap, topics, tmp_path_factory.mktemp("shards"))
    cluster.table = EveryShard(urls)
    try:
        node = cluster.start(admin_token=Secret(TOKEN), admin_read_token=Secret(READ_TOKEN))
        cluster.wait_ready([node])
        yield Live(cluster, node, kafka_bootstrap), urls
    finally:
        cluster.close()
        delete_topics(kafka_bootstrap, topics)
        for url in urls:
            database_factory.drop(url)


def test_the_shards_panel_shows_each_database_and_a_partition_moved(
    sharded_live: tuple[Live, list[str]], browser: Any
) -> None:
    live, urls = sharded_live
    ids = ids_of("acme", 12)
    live.schedule("acme", ids, key=lambda n: f"key-{n}".encode())  # over the three partitions
    page = Page(browser, live)
    page.until(lambda: page.shown("#shards-section") == 1)
    page.until(lambda: [r[:2] for r in page.rows("shards")] == [["0", "up"], ["1", "up"]])
    page.until(lambda: sum(int(r[2]) for r in page.rows("shards")) == len(ids))
    assert page.text("shards-note") == "map mod"

    assert cli.main(["shards", "move", "1", "--to", "0", "--database-url", " ".join(urls)]) == 0
    page.until_text("shards-note", "partition 1 moved to shard 0")
    page.until(lambda: [int(r[2]) for r in page.rows("shards")] == [len(ids), 0])
