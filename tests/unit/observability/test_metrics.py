"""Removing a labelled series (``metrics.remove_series``): a label set never created on this node
is no error, whatever prometheus_client the package allows (before 0.22, ``remove`` raises
KeyError for it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from chronos.observability import metrics
from tests.support.metrics import remove_as_before_0_22


@pytest.mark.parametrize("kind", [Gauge, Counter, Histogram])
def test_removing_a_series_never_created_is_no_error(
    kind: type[MetricWrapperBase], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A registry of its own: the default one is what the docs' metric list is checked against.
    family = kind(
        f"chronos_test_removal_{kind.__name__.lower()}",
        "a test family",
        ["a", "b"],
        registry=CollectorRegistry(),
    )
    monkeypatch.setattr(family, "remove", remove_as_before_0_22(family))
    with pytest.raises(KeyError):  # the old library, as it is
        family.remove("never", "made")
    metrics.remove_series(family, "never", "made")
    family.labels("made", "once")
    metrics.remove_series(family, "made", "once")
    metrics.remove_series(family, "made", "once")  # gone already
    assert [s for m in family.collect() for s in m.samples] == []


def test_no_metric_family_is_removed_from_but_through_remove_series() -> None:
    """``FAMILY.remove(...)`` / ``metrics.FAMILY.remove(...)`` anywhere in the package would
    raise KeyError on the older prometheus_client for a series never created (the firing loop
    died of ``RATE_LIMITED.remove`` once a limit was cleared before this node claimed under
    it); ``metrics.remove_series`` is the one way."""
    package = Path(metrics.__file__).parents[1]
    found = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        if ".remove(" not in text:
            continue
        for node in ast.walk(ast.parse(text, str(path))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "remove"
            ):
                continue
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name.isupper() and path.name != "metrics.py":
                found.append(f"{path.relative_to(package)}:{node.lineno}")
    assert found == []
