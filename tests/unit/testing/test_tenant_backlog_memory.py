"""The per-tenant backlog contract against the in-memory store (``harness``: conftest.py)."""

from __future__ import annotations

from tests.support.store_contract import TenantBacklogContract


class TestInMemoryTenantBacklog(TenantBacklogContract):
    pass
