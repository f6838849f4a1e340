"""Fixtures of the tests of ``chronos.testing``."""

from __future__ import annotations

import pytest

from tests.support.store_contract.harnesses import MemoryHarness


@pytest.fixture
def harness() -> MemoryHarness:
    """The in-memory store on a manual clock, for the store contract."""
    return MemoryHarness()
