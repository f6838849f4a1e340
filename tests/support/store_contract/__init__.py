"""The behaviour every Store must have, written once and run against each implementation.

``tests/unit/testing/test_store_memory.py`` runs it against ``chronos.testing.InMemoryStore`` (a
manual clock: time moves only when the test says); ``tests/integration/test_store_postgres.py``
runs the very same tests against ``PostgresStore`` on the real Postgres (real time: ``advance``
sleeps). Deadlines sit seconds away from every boundary, so the real clock moving never changes
an answer, except inside ``harness.frozen()``: there the clock stands still (on Postgres, one
transaction and its now()), and a test puts rows exactly on a boundary.

A store's test module subclasses the contracts it fulfils and provides a ``harness`` fixture
(``harnesses.py`` has one harness per store): ``StoreContract`` (every part below),
``ActionContract`` (chronosAction and chronosTopic), ``TenantContract`` (tenants and the fair
claim) and ``TenantBacklogContract`` (the per-tenant backlog, on a harness that also sets a row's
tenant).
"""

from __future__ import annotations

from tests.support.store_contract.actions import ActionContract
from tests.support.store_contract.admin import AdminContract
from tests.support.store_contract.catchup import CatchupContract
from tests.support.store_contract.claim import ClaimContract
from tests.support.store_contract.common import FAR, HORIZON, Harness, claims, msg, node
from tests.support.store_contract.enqueue import EnqueueContract
from tests.support.store_contract.find import FindContract
from tests.support.store_contract.moves import MovesContract
from tests.support.store_contract.pauses import LimitContract, PauseContract
from tests.support.store_contract.recovery import RecoveryContract
from tests.support.store_contract.release import ReleaseContract
from tests.support.store_contract.series import SeriesContract
from tests.support.store_contract.tenant_backlog import TenantBacklogContract
from tests.support.store_contract.tenants import TenantContract


class StoreContract(
    EnqueueContract,
    ClaimContract,
    ReleaseContract,
    SeriesContract,
    RecoveryContract,
    AdminContract,
    FindContract,
    PauseContract,
    CatchupContract,
    LimitContract,
    MovesContract,
):
    """Every part of the store contract but actions and tenants. Subclasses provide a
    ``harness`` fixture."""


__all__ = [
    "FAR",
    "HORIZON",
    "ActionContract",
    "Harness",
    "StoreContract",
    "TenantBacklogContract",
    "TenantContract",
    "claims",
    "msg",
    "node",
]
