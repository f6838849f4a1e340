"""The store: the Store interface and its records (types), the Postgres store, its named SQL
(sql/*.sql), the schema and migrations. Imports of ``chronos.store`` get the interface, its
records and ``PostgresStore``."""

from __future__ import annotations

from chronos.store.backlog import Backlog, TenantBacklog, TenantBacklogs
from chronos.store.batch import encode_batch
from chronos.store.filters import (
    BULK_BATCH,
    OUTCOMES,
    BulkBatch,
    MessageCount,
    MessageFilter,
)
from chronos.store.flow import (
    PAUSE_REFRESH_S,
    RESUME_REFRESH_S,
    Catchup,
    Limit,
    Pause,
    PauseKind,
    PauseSet,
)
from chronos.store.history import (
    EndedOnArrival,
    EndedRecord,
    Ending,
    HistorySummary,
    Maintenance,
)
from chronos.store.postgres.session import libpq_url, session_options
from chronos.store.postgres.store import PostgresStore, statement_params
from chronos.store.types import (
    COUNT_LIMIT,
    DEFAULT_CANCEL_TTL_MS,
    EXACT_COUNT_BELOW,
    FAIR_TENANTS_PER_CLAIM,
    KNOWN_TENANTS_MEMORY,
    LIST_QUERIES,
    UNBOUNDED_BYTES,
    Advance,
    CancelOutcome,
    Claim,
    ClaimedRow,
    MessageRecord,
    NodeRecord,
    Outcome,
    RequeueOutcome,
    RescheduleOutcome,
    Store,
    StuckRow,
    row_bytes,
)

__all__ = [
    "BULK_BATCH",
    "COUNT_LIMIT",
    "DEFAULT_CANCEL_TTL_MS",
    "EXACT_COUNT_BELOW",
    "FAIR_TENANTS_PER_CLAIM",
    "KNOWN_TENANTS_MEMORY",
    "LIST_QUERIES",
    "OUTCOMES",
    "PAUSE_REFRESH_S",
    "RESUME_REFRESH_S",
    "UNBOUNDED_BYTES",
    "Advance",
    "Backlog",
    "BulkBatch",
    "CancelOutcome",
    "Catchup",
    "Claim",
    "ClaimedRow",
    "EndedOnArrival",
    "EndedRecord",
    "Ending",
    "HistorySummary",
    "Limit",
    "Maintenance",
    "MessageCount",
    "MessageFilter",
    "MessageRecord",
    "NodeRecord",
    "Outcome",
    "Pause",
    "PauseKind",
    "PauseSet",
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
