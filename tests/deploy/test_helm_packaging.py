"""The chart as it ships: `helm package` and `helm lint` of the archive (Helm's own code, through
helm-python-sdk: no binary, no network), its README generated from values.yaml, and every values
example the documentation shows rendering as documented."""

from __future__ import annotations

import itertools
import re
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.deploy import chart_readme
from tests.deploy.helm_support import (
    CHART_DIR,
    CRD_SCHEMAS,
    KUBE_VERSIONS,
    MINIMAL_VALUES,
    NAMESPACE,
    RELEASE,
    REPO_ROOT,
    Rendered,
    merge,
    render,
    validate,
)
from tests.deploy.helm_values import SCENARIOS

# ----------------------------------------------------------------------------------------------
# helm package, helm lint
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(helm.package(CHART_DIR, destination=tmp_path_factory.mktemp("package")))


def test_the_chart_packages_with_what_it_needs_and_nothing_else(archive: Path) -> None:
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert archive.name == f"chronos-{chart['version']}.tgz"
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    for needed in (
        "Chart.yaml",
        "values.yaml",
        "values.schema.json",
        "README.md",
        "dashboards/chronos.json",
        "rules/chronos-alerts.yaml",
        "templates/networkpolicy.yaml",
    ):
        assert f"chronos/{needed}" in names
    assert not [n for n in names if n.endswith((".py", ".pyc"))]


@pytest.mark.parametrize("scenario", ["minimal", "escape-hatches", "admin-port-network-policy"])
def test_the_archive_renders_as_the_chart_directory(archive: Path, scenario: str) -> None:
    values = merge(MINIMAL_VALUES, SCENARIOS[scenario])
    with helm.Chart.load_archive(archive.read_bytes()) as chart:
        packaged = chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    assert Rendered(packaged).manifests == render(SCENARIOS[scenario]).manifests


def test_the_archive_lints_clean(archive: Path) -> None:
    report = helm.lint(archive, merge(MINIMAL_VALUES, SCENARIOS["escape-hatches"]), strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


# ----------------------------------------------------------------------------------------------
# The chart's README
# ----------------------------------------------------------------------------------------------


def test_the_chart_readme_is_generated_from_values_yaml() -> None:
    assert chart_readme.README.read_text() == chart_readme.generate(), (
        f"helm/chronos/README.md is out of date: run {chart_readme.COMMAND}"
    )


def test_every_top_level_value_has_a_comment() -> None:
    values = chart_readme.documented_values((CHART_DIR / "values.yaml").read_text())
    top_level = {v.path: v for v in values if "." not in v.path}
    declared = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert set(top_level) == set(declared)
    assert [path for path, v in top_level.items() if not v.description] == []


def test_the_readme_parser_reads_comments_as_helm_docs_does() -> None:
    text = (
        "# A file comment.\n"
        "\n"
        "# an example, not the description\n"
        "# -- The description,\n"
        "# on two lines.\n"
        "top:\n"
        "  # -- A child.\n"
        "  child: 1\n"
        "  plain: x\n"
        "peers:\n"
        "  # -- Not a value: a key of a list item.\n"
        "  - podSelector: {}\n"
        "    inner: 2\n"
    )
    found = {v.path: v for v in chart_readme.documented_values(text)}
    assert set(found) == {"top", "top.child", "peers"}
    assert found["top"].description == "The description, on two lines."
    assert found["top.child"].default == 1
    assert found["peers"].description == ""


# ----------------------------------------------------------------------------------------------
# Every documented values example renders
# ----------------------------------------------------------------------------------------------

DOCUMENTS = [
    REPO_ROOT / "README.md",
    *sorted((REPO_ROOT / "docs").glob("*.md")),
    CHART_DIR / "README.md",
]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_INLINE = re.compile(r"`([^`\n]*--set [^`\n]*)`")
VALUES_SNIPPET = "# values.yaml"  # the first line of a ```yaml block of chart values


@dataclass(frozen=True)
class Example:
    where: str
    snippet: dict[str, Any]  # a values file
    sets: tuple[str, ...]  # or the --set options of a command line
    complete: bool  # a whole install command: rendered as it stands, without MINIMAL_VALUES

    def values(self) -> dict[str, Any]:
        """The values, the --set options parsed by Helm's own parser as `helm` parses them."""
        values = self.snippet
        for expression in self.sets:
            values = merge(values, helm.parse_set_string(expression))
        return values


def _sets(args: list[str]) -> tuple[str, ...]:
    return tuple(arg for flag, arg in itertools.pairwise(args) if flag == "--set")


def documented_examples() -> list[Example]:
    found: list[Example] = []
    for path in DOCUMENTS:
        text = path.read_text()
        where = str(path.relative_to(REPO_ROOT))

        def line_of(offset: int, text: str = text, where: str = where) -> str:
            return f"{where}:{text.count(chr(10), 0, offset) + 1}"

        for fence in _FENCE.finditer(text):
            language, body = fence[1], fence[2]
            if language == "yaml" and body.startswith(VALUES_SNIPPET):
                found.append(Example(line_of(fence.start()), yaml.safe_load(body), (), False))
            if language not in ("sh", "bash", "shell", ""):
                continue
            for command in body.replace("\\\n", " ").splitlines():
                args = shlex.split(command, comments=True)
                if args[:1] == ["helm"] and len(args) > 1 and args[1] in ("install", "upgrade"):
                    found.append(Example(line_of(fence.start()), {}, _sets(args), True))
        for inline in _INLINE.finditer(text):
            if "helm " in inline[1] and "./helm/chronos" in inline[1]:
                continue  # a whole command written inline, without its values
            args = shlex.split(inline[1])
            found.append(Example(line_of(inline.start()), {}, _sets(args), False))
    return found


EXAMPLES = documented_examples()


def test_the_documentation_shows_examples_of_every_kind() -> None:
    assert len([e for e in EXAMPLES if e.complete]) >= 3  # README, operations, the chart README
    assert len([e for e in EXAMPLES if not e.complete]) >= 5
    assert any(e.where.startswith("helm/chronos/README.md") for e in EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.where for e in EXAMPLES])
def test_each_documented_example_renders_and_validates(example: Example) -> None:
    rendered = render(example.values(), minimal=not example.complete)
    assert rendered.one("Deployment")
    for manifest in rendered.manifests:
        group = manifest["apiVersion"].rpartition("/")[0]
        custom = "." in group and not group.endswith(".k8s.io")
        if custom and (manifest["apiVersion"], manifest["kind"]) not in CRD_SCHEMAS:
            continue  # a custom resource the tests have no schema of (PrometheusRule)
        validate(manifest, KUBE_VERSIONS[-1])
