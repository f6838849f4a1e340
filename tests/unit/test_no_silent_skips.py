"""No test skips silently: a missing tool or service goes through
``tests.support.services.unavailable`` (a skip on a developer's machine, a failure in CI), and
the only conditional skips are the opt-in scenarios named here."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
SKIPS = re.compile(r"pytest\.skip\(|importorskip\(|pytest\.mark\.skip\(|\.skipif\(")
ALLOWED = {
    # the path taken as root only (CI runs as root, so it runs there)
    "integration/test_embedded_services.py",
    # opt-in full-size broker scenarios (CHRONOS_TEST_BROKER_FAILOVER=1, `make reliability`)
    "fault/test_21_broker_failover.py",
    "fault/test_25_broker_partition.py",
    # the one place that decides between a skip and a failure
    "support/services.py",
}


def test_every_skip_goes_through_the_helper_that_fails_in_ci() -> None:
    found = sorted(
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("*.py")
        if path != Path(__file__) and SKIPS.search(path.read_text())
    )
    assert [f for f in found if f not in ALLOWED] == []
