"""prometheus_client as the package's oldest allowed versions behave, for the tests of the
metrics Chronos removes."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client.metrics import MetricWrapperBase


def remove_as_before_0_22(family: MetricWrapperBase) -> Callable[..., None]:
    """``family.remove`` as prometheus_client 0.20 and 0.21 have it (pyproject allows >= 0.20):
    KeyError for a series never created; 0.22 made it a no-op."""

    def remove(*labelvalues: str) -> None:
        del family._metrics[tuple(str(v) for v in labelvalues)]

    return remove
