"""The store: the Store interface and its records (types), the Postgres store, its named SQL
(sql/queries.sql), the schema and migrations. Imports of ``chronos.store`` get the interface, its
records and ``PostgresStore``."""

from __future__ import annotations

from chronos.store.postgres import (
    DEFAULT_CANCEL_TTL_MS,
    FAIR_TENANTS_PER_CLAIM,
    KNOWN_TENANTS_MEMORY,
    LIST_QUERIES,
    UNBOUNDED_BYTES,
    Backlog,
    CancelOutcome,
    Claim,
    ClaimedRow,
    MessageRecord,
    NodeRecord,
    Outcome,
    PostgresStore,
    RequeueOutcome,
    RescheduleOutcome,
    Store,
    StuckRow,
    TenantBacklog,
    TenantBacklogs,
    encode_batch,
    libpq_url,
    row_bytes,
    session_options,
    statement_params,
)

__all__ = [
    "DEFAULT_CANCEL_TTL_MS",
    "FAIR_TENANTS_PER_CLAIM",
    "KNOWN_TENANTS_MEMORY",
    "LIST_QUERIES",
    "UNBOUNDED_BYTES",
    "Backlog",
    "CancelOutcome",
    "Claim",
    "ClaimedRow",
    "MessageRecord",
    "NodeRecord",
    "Outcome",
    "PostgresStore",
    "RequeueOutcome",
    "RescheduleOutcome",
    "Store",
    "StuckRow",
    "TenantBacklog",
    "TenantBacklogs",
    "encode_batch",
    "libpq_url",
    "row_bytes",
    "session_options",
    "statement_params",
]
