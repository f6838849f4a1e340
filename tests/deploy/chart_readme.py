"""Writes helm/chronos/README.md from the chart's values.yaml: its opening comment, then a table of
every top-level key and every key documented with a ``# --`` comment (helm-docs' convention: the
comment block right above a key, from its ``# --`` line on), with its default.

    .venv/bin/python -m tests.deploy.chart_readme          # rewrite the README
    .venv/bin/python -m tests.deploy.chart_readme --check  # exit 1 when it is out of date

tests/deploy/test_helm_packaging.py fails while the README differs from what this writes.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CHART_DIR = Path(__file__).resolve().parents[2] / "helm" / "chronos"
README = CHART_DIR / "README.md"
COMMAND = ".venv/bin/python -m tests.deploy.chart_readme"

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?: |$)")
_COMMENT = re.compile(r"^(?P<indent> *)#(?: (?P<text>.*))?$")
MAX_INLINE_DEFAULT = 48  # longer defaults (maps, lists) are left to values.yaml


@dataclass(frozen=True)
class Value:
    path: str  # dotted, e.g. kafkaTLS.secretName
    default: Any
    description: str  # "" when the key has no ``# --`` comment


def _lookup(values: Any, path: list[str]) -> tuple[bool, Any]:
    for key in path:
        if not isinstance(values, dict) or key not in values:
            return False, None
        values = values[key]
    return True, values


def documented_values(text: str) -> list[Value]:
    """Every key of the values file (lines of mappings, not of list items) with its comment."""
    values = yaml.safe_load(text)
    found: list[Value] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the mappings above the line
    comments: list[tuple[int, str]] = []  # the comment block right above the line
    for line in text.splitlines():
        comment = _COMMENT.match(line)
        if comment:
            comments.append((len(comment["indent"]), comment["text"] or ""))
            continue
        key = _KEY.match(line)
        if not key:
            comments = []
            continue
        indent = len(key["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [key["key"]]
        stack.append((indent, key["key"]))
        exists, default = _lookup(values, path)
        block = [t for i, t in comments if i == indent]
        comments = []
        if not exists:  # a key of a list item (networkPolicy.metricsFrom[0]...)
            continue
        starts = [n for n, t in enumerate(block) if t.startswith("-- ")]
        described = block[starts[-1] :] if starts else []
        description = " ".join(" ".join(t.removeprefix("-- ") for t in described).split())
        if description or len(path) == 1:
            found.append(Value(".".join(path), default, description))
    return found


def _default(value: Any) -> str:
    if isinstance(value, str):
        shown = json.dumps(value)
    else:
        shown = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
        shown = shown.removesuffix("...").strip()
    if len(shown) > MAX_INLINE_DEFAULT:
        return "(see values.yaml)"
    return f"`{shown}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _opening(text: str) -> list[str]:
    """The values file's opening comment as Markdown: its indented lines as a shell block."""
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("# --") or not line.startswith("#"):
            break
        lines.append(line.removeprefix("#").removeprefix(" "))
    while lines and not lines[-1]:
        lines.pop()
    out: list[str] = []
    in_code = False
    for line in lines:
        code = line.startswith("  ")
        if code and not in_code:
            out.append("```sh")
        elif not code and in_code:
            out.append("```")
        in_code = code
        out.append(line[2:] if code else line)
    if in_code:
        out.append("```")
    return out


def render(values_text: str, chart: dict[str, Any]) -> str:
    rows = [
        f"| `{v.path}` | {_default(v.default)} | {_cell(v.description)} |"
        for v in documented_values(values_text)
    ]
    lines = [
        f"# The {chart['name']} chart",
        "",
        "<!-- Generated from values.yaml by tests/deploy/chart_readme.py: edit values.yaml and",
        f"     run `{COMMAND}`. -->",
        "",
        " ".join(str(chart["description"]).split()),
        "",
        f"Chart version {chart['version']}, Chronos {chart['appVersion']}, Kubernetes "
        f"{chart['kubeVersion']}. Running it in production (secrets, migrations, probes, "
        "autoscaling, network policy): docs/operations.md of the Chronos repository; every value "
        "in detail: its docs/reference.md.",
        "",
        *_opening(values_text),
        "",
        "## Values",
        "",
        "| key | default | description |",
        "|---|---|---|",
        *rows,
        "",
    ]
    return "\n".join(lines)


def generate() -> str:
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    return render((CHART_DIR / "values.yaml").read_text(), chart)


def main(argv: list[str]) -> int:
    text = generate()
    if "--check" in argv:
        if not README.exists() or README.read_text() != text:
            print(f"{README} is out of date: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    README.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
