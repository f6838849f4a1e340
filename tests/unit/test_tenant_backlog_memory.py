"""The per-tenant backlog contract against the in-memory store."""

from __future__ import annotations

import pytest

from tests.unit.store_contract_tenant_backlog import TenantBacklogContract
from tests.unit.test_store_memory import MemoryHarness


class TenantMemoryHarness(MemoryHarness):
    def set_tenant(self, message_id: str, tenant: str | None) -> None:
        self.store.set_tenant(message_id, tenant)


@pytest.fixture
def harness() -> TenantMemoryHarness:
    return TenantMemoryHarness()


class TestInMemoryTenantBacklog(TenantBacklogContract):
    pass
