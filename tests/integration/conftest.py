"""Fixtures of the integration tier (the services themselves: ``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.integration.admin_api import TOKEN, Api, serve
from tests.integration.nodes import Nodes
from tests.support import Topics
from tests.support.store_contract.harnesses import PostgresHarness


@pytest.fixture
def harness(migrated_database_url: str) -> Iterator[PostgresHarness]:
    """PostgresStore on a fresh migrated database, for the store contract."""
    harness = PostgresHarness(migrated_database_url)
    yield harness
    harness.close()


@pytest.fixture
def nodes(migrated_database_url: str, kafka_bootstrap: str, topics: Topics) -> Iterator[Nodes]:
    """In-process nodes on this test's database and topics; stopped at the end of the test."""
    started = Nodes(migrated_database_url, kafka_bootstrap, topics)
    yield started
    started.stop_all()


@pytest.fixture
def start_api() -> Iterator[Callable[..., Api]]:
    """``start_api(database_url, token=TOKEN)``: an admin API server on that database; every one
    started is shut down after the test."""
    started: list[Api] = []

    def start(database_url: str, token: str = TOKEN, **overrides: Any) -> Api:
        api = serve(database_url, token, **overrides)
        started.append(api)
        return api

    yield start
    for api in started:
        api.close()


@pytest.fixture
def api(migrated_database_url: str, start_api: Callable[..., Api]) -> Api:
    """The admin API on a fresh migrated database, with the token ``TOKEN``."""
    return start_api(migrated_database_url)
