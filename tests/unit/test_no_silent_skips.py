"""No test skips silently: a missing tool or service goes through
``tests.support.services.unavailable`` (a skip on a developer's machine, a failure in CI), and
the only conditional skips are the opt-in long scenarios named here, which ``make test-long``
runs with their switches set. CI (``.ci/run``) says it is CI itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
# Every way a test can end up not run or not counted: a skip (called, marked, imported,
# unittest's), an expected failure, an exit, and files or items left out of collection.
SKIPS = re.compile(
    r"pytest\.skip\b|importorskip\(|pytest\.mark\.skip\b|\.skipif\(|\bxfail\b|SkipTest"
    r"|unittest\.skip|pytest\.exit\(|from pytest import [^\n]*\bskip\b|collect_ignore"
    r"|pytest_ignore_collect|pytest_deselected"
)
ALLOWED = {
    # the path taken as root only (CI runs as root, so it runs there)
    "integration/test_embedded_services.py",
    # opt-in full-size broker scenarios (OPT_IN below; `make test-long`)
    "fault/test_21_broker_failover.py",
    "fault/test_25_broker_partition.py",
    # the one place that decides between a skip and a failure
    "support/services.py",
}
OPT_IN = {"CHRONOS_TEST_BROKER_FAILOVER": "1"}
"""The switches of the long scenarios that ``make test`` skips (saying why), and the value that
runs them: ``make test-long`` sets each."""
LONG = {"CHRONOS_TEST_OUTAGE_S": "120", "CHRONOS_FAULT_LONG": "1"}
"""The switches that make a scenario of the suite run long: ``make test-long`` sets them too.
``CHRONOS_FAULT_LONG`` is read through ``tests/fault/conftest.py`` (``LONG_RUN_ENV``, the
``long_run`` fixture): a scenario that names either uses it."""
LONG_RUN_NAMES = re.compile(r"\bLONG_RUN_ENV\b|\blong_run\b")
OTHER_CONDITIONS = {"os.geteuid() != 0"}  # integration/test_embedded_services.py, as root only


def _sources() -> dict[str, str]:
    return {
        str(path.relative_to(TESTS)): path.read_text()
        for path in TESTS.rglob("*.py")
        if path != Path(__file__)
    }


def _skipif_conditions(source: str) -> list[str]:
    """The source of every ``skipif`` condition (its first argument)."""
    return [
        ast.get_source_segment(source, node.args[0]) or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "skipif"
        and node.args
    ]


def _makefile_recipe(target: str) -> str:
    """The variables and recipe lines of ``target`` in the Makefile, variables expanded once."""
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    variables = dict(re.findall(r"^([A-Z_]+)\s*:?=\s*(.*)$", text, re.M))
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n?)+)", text, re.M)
    assert match, f"the Makefile has no {target} target"
    return re.sub(r"\$\(([A-Z_]+)\)", lambda m: variables.get(m[1], m[0]), match[1])


def test_every_skip_goes_through_the_helper_that_fails_in_ci() -> None:
    found = sorted(name for name, source in _sources().items() if SKIPS.search(source))
    assert [f for f in found if f not in ALLOWED] == []


def test_the_guard_sees_every_kind_of_skip() -> None:
    for line in (
        "pytest.skip('no')",
        "@pytest.mark.skip",
        "@pytest.mark.skip(reason='x')",
        "@pytest.mark.skipif(True, reason='x')",
        "pytest.importorskip('x')",
        "@pytest.mark.xfail",
        "pytest.xfail('x')",
        "raise unittest.SkipTest('x')",
        "@unittest.skip('x')",
        "from pytest import raises, skip",
        "pytest.exit('x')",
        "collect_ignore = ['x.py']",
        "def pytest_ignore_collect(collection_path, config): ...",
        "config.hook.pytest_deselected(items=left_out)",
    ):
        assert SKIPS.search(line), line


def test_the_only_conditional_skips_are_the_opt_in_switches() -> None:
    """Every ``skipif`` is an opt-in long scenario (one of OPT_IN, compared with the value that
    runs it) or the root-only path."""
    for name, source in _sources().items():
        for condition in _skipif_conditions(source):
            if condition in OTHER_CONDITIONS:
                continue
            switches = re.findall(r"os\.environ\.get\(\"(CHRONOS_TEST_\w+)\"", condition)
            assert switches, f"{name}: skipif({condition}) is not an opt-in switch"
            for switch in switches:
                assert switch in OPT_IN, f"{name}: {switch} is not listed in OPT_IN"
                assert f'!= "{OPT_IN[switch]}"' in condition, (name, condition)


def test_make_test_long_runs_every_opt_in_and_long_scenario() -> None:
    recipe = _makefile_recipe("test-long")
    for switch, value in {**OPT_IN, **LONG}.items():
        assert f"{switch}={value}" in recipe, f"make test-long does not set {switch}={value}"
    users = {
        name
        for name, source in _sources().items()
        if name.startswith("fault/test_")
        and (
            any(f'os.environ.get("{switch}"' in source for switch in {*OPT_IN, *LONG})
            or LONG_RUN_NAMES.search(source)
        )
    }
    assert "fault/test_26_group_protocol.py" in users, sorted(users)  # through LONG_RUN_ENV
    for name in users:
        assert f"tests/{name}" in recipe, f"make test-long does not run tests/{name}"
    documented = (ROOT / "docs" / "development.md").read_text()
    assert "make test-long" in documented


def test_ci_says_it_is_ci_itself() -> None:
    """``unavailable`` fails instead of skipping only under CI=true: the CI script sets it
    rather than trusting the runner to."""
    script = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^export CI=true$", script, re.M), script
