"""Fixtures of the fault suite: node processes (``make_cluster``) on a fresh database and fresh
topics per test; on failure, the tail of every node's log is printed with the report."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import Topics
from tests.support.cluster import Cluster


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def make_cluster(
    migrated_database_url: str,
    kafka_bootstrap: str,
    topics: Topics,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., Cluster]]:
    """``make_cluster(**settings)``: a Cluster on this test's database and topics."""
    clusters: list[Cluster] = []

    def make(**overrides: Any) -> Cluster:
        cluster = Cluster(
            migrated_database_url,
            kafka_bootstrap,
            topics,
            tmp_path / f"cluster{len(clusters) + 1}",
            **overrides,
        )
        clusters.append(cluster)
        return cluster

    yield make
    failed = getattr(request.node, "rep_call", None)
    for cluster in clusters:
        if failed is not None and failed.failed:
            print(cluster.logs())
        cluster.close()


LONG_RUN_ENV = "CHRONOS_FAULT_LONG"
"""Set to 1 to run the scenarios that have one at the issue's full size (minutes each); CI runs
them scaled down."""


@pytest.fixture
def long_run() -> bool:
    """The full-size variant of a scenario is asked for (``CHRONOS_FAULT_LONG=1``)."""
    return os.environ.get(LONG_RUN_ENV) == "1"
