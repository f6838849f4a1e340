"""The end-to-end tier's fixtures: nodes as real ``chronos run`` processes, and the console's
live node and headless browser (one of each per test module)."""

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.console_support import Live, headless_browser, live_node
from tests.e2e.test_cli_e2e import run_node
from tests.support.databases import DatabaseFactory

__all__ = ["browser", "live", "run_node"]


@pytest.fixture(scope="module")
def live(
    database_factory: DatabaseFactory,
    kafka_bootstrap: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Live]:
    yield from live_node(database_factory, kafka_bootstrap, tmp_path_factory)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from headless_browser()
