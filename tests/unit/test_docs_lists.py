"""The documentation lists what the code has, and nothing it does not: every metric the node
registers, every setting (docs/configuration.md), every Helm value, every command-line flag, every
field of the admin API's answers and every status it answers with (docs/reference.md). A name
added to the code without a line in the docs, or left in the docs after the code dropped it,
fails here."""

from __future__ import annotations

import argparse
import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

import chronos.cli
import chronos.node.supervisor  # registers every loop's metrics
from chronos.config.settings import OPTIONS
from chronos.observability.relay import ProcessFamilies

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference.md"
CONFIGURATION = ROOT / "docs" / "configuration.md"
CODE_SPAN = re.compile(r"`([^`]+)`")

# Helm values whose children are Kubernetes objects or free-form maps passed through as given:
# documented as one value.
HELM_OBJECTS = {
    "config",
    "secrets.extra",
    "resources",
    "migrations.resources",
    "podSecurityContext",
    "securityContext",
    "updateStrategy",
    "affinity",
    "nodeSelector",
    "tolerations",
    "topologySpreadConstraints",
    "podAnnotations",
    "podLabels",
    "serviceAccount.annotations",
    "service.annotations",
    "imagePullSecrets",
    "metrics.serviceMonitor.labels",
    "metrics.grafanaDashboard.labels",
    "metrics.grafanaDashboard.annotations",
    "metrics.prometheusRule.labels",
    "autoscaling.hpa.metrics",
    "autoscaling.hpa.behavior",
    "autoscaling.keda.fallback",
    "autoscaling.keda.behavior",
    "autoscaling.keda.extraTriggers",
}


def section(markdown: str, heading: str) -> str:
    """The text under a ``## heading`` up to the next heading of that level."""
    match = re.search(rf"^## {re.escape(heading)}\s*$(.*?)(?=^## |\Z)", markdown, re.S | re.M)
    assert match, f"docs/reference.md has no section '## {heading}'"
    return match.group(1)


def first_cells(markdown: str) -> list[str]:
    """The code spans of each table row's first cell (header rows have none)."""
    names = []
    for line in markdown.splitlines():
        if line.startswith("|") and not line.startswith("|-") and not line.startswith("| -"):
            names.extend(CODE_SPAN.findall(line.split("|")[1]))
    return names


def table_rows(markdown: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in markdown.splitlines()
        if line.startswith("|") and not re.match(r"^\|\s*-", line)
    ]


# -- metrics


def registered_metrics() -> set[str]:
    """What /metrics exposes, by the names the docs use (counters with their ``_total``): the
    families registered and those each process reports of itself."""
    names = set()
    for family in [*REGISTRY.collect(), *ProcessFamilies("node").collect()]:
        if family.name.startswith("chronos_"):
            suffix = "_total" if family.type == "counter" else ""
            names.add(family.name + suffix)
    return names


def test_every_metric_is_listed() -> None:
    listed = set(first_cells(section(REFERENCE.read_text(), "Metrics")))
    registered = registered_metrics()
    assert registered - listed == set(), "metrics registered but not in docs/reference.md"
    assert listed - registered == set(), "metrics in docs/reference.md that no code registers"


# -- settings


def test_every_setting_is_in_the_configuration_table() -> None:
    rows = {
        CODE_SPAN.findall(row[0])[0]: row
        for row in table_rows(CONFIGURATION.read_text())
        if row and CODE_SPAN.findall(row[0]) and CODE_SPAN.findall(row[0])[0].startswith("CHRONOS_")
    }
    declared = {option.env: option for option in OPTIONS}
    missing = sorted(set(declared) - set(rows))
    assert missing == [], "settings not in docs/configuration.md's table"
    for env, option in declared.items():
        assert f"`{option.flag}`" in rows[env][1], f"{env}: flag {option.flag} not in its row"
    unknown = sorted(
        env
        for env in set(rows) - set(declared)
        if not env.endswith("__")  # the librdkafka pass-through prefixes
    )
    assert unknown == [], "docs/configuration.md lists settings the code does not declare"


# -- Helm values


def helm_values(values: object, prefix: str = "") -> Iterator[str]:
    if isinstance(values, dict) and prefix not in HELM_OBJECTS:
        for key, value in values.items():
            yield from helm_values(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix


def test_every_helm_value_is_listed() -> None:
    values = yaml.safe_load((ROOT / "helm" / "chronos" / "values.yaml").read_text())
    declared = set(helm_values(values))
    listed = set(first_cells(section(REFERENCE.read_text(), "Helm values")))
    assert declared - listed == set(), "Helm values not in docs/reference.md"
    assert listed - declared == set(), "docs/reference.md lists Helm values the chart has not"


# -- command line


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if path and not subcommands:
        yield " ".join(path), parser
    for action in subcommands:
        for name, sub in action.choices.items():
            yield from commands(sub, (*path, name))


def own_flags(parser: argparse.ArgumentParser) -> set[str]:
    """A command's flags but the node settings' (listed in docs/configuration.md)."""
    settings = {option.flag for option in OPTIONS}
    settings |= {"--kafka-property", "--consumer-property", "--producer-property"}
    return {
        flag
        for action in parser._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag not in settings and flag != "--help"
    }


def test_every_command_and_flag_is_listed() -> None:
    listed: dict[str, set[str]] = {}
    for row in table_rows(section(REFERENCE.read_text(), "Command line")):
        command = CODE_SPAN.findall(row[0])
        if command and command[0].startswith("chronos "):
            listed[command[0].removeprefix("chronos ")] = {
                span.split()[0].split("=")[0]
                for span in CODE_SPAN.findall(row[1])
                if span.startswith("--")
            }
    code = {name: own_flags(sub) for name, sub in commands(chronos.cli._parser())}
    assert sorted(code) == sorted(listed), "commands of docs/reference.md and of the CLI differ"
    for name, flags in code.items():
        assert flags == listed[name], f"chronos {name}: flags differ from docs/reference.md"


# -- admin API


def test_every_admin_field_is_listed() -> None:
    spec = json.loads((ROOT / "chronos" / "admin" / "openapi.json").read_text())
    text = section(REFERENCE.read_text(), "Admin API fields")
    listed: dict[str, set[str]] = {}
    for row in table_rows(text):
        schema = CODE_SPAN.findall(row[0])
        if schema:
            listed.setdefault(schema[0], set()).update(CODE_SPAN.findall(row[1]))
    declared = {
        name: set(schema.get("properties", {})).union(
            *(alternative.get("properties", {}) for alternative in schema.get("oneOf", []))
        )
        for name, schema in spec["components"]["schemas"].items()
    }
    assert sorted(declared) == sorted(listed), "answers of the spec and of the docs differ"
    for name, fields in declared.items():
        assert fields == listed[name], f"{name}: fields differ from docs/reference.md"


def answered_statuses() -> set[int]:
    """Every status the admin API and the node's HTTP server answer with, read from the code:
    the first argument of ``ApiError``, ``_json`` and ``_send`` calls, and the spec's codes."""
    statuses: set[int] = set()
    files = [*(ROOT / "chronos" / "admin").glob("*.py"), ROOT / "chronos" / "node" / "http.py"]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name | ast.Attribute)
                and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr)
                in {"ApiError", "_json", "_send"}
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, int)
            ):
                statuses.add(node.args[0].value)
    spec = json.loads((ROOT / "chronos" / "admin" / "openapi.json").read_text())
    for methods in spec["paths"].values():
        for operation in methods.values():
            if isinstance(operation, dict):
                statuses |= {int(code) for code in operation.get("responses", {})}
    return statuses


def test_every_admin_status_is_listed() -> None:
    listed = {
        int(code)
        for code in first_cells(section(REFERENCE.read_text(), "Admin API statuses"))
        if code.isdigit()
    }
    assert answered_statuses() - listed == set(), "statuses answered but not documented"
    assert listed - answered_statuses() == set(), "statuses documented that nothing answers"


# -- the grants of "Running against your own Kafka and Postgres"


def test_the_documented_grants_are_those_the_least_privilege_test_runs_with() -> None:
    from tests.integration.test_least_privilege import NODE_GRANTS

    page = (ROOT / "docs" / "own-infrastructure.md").read_text()
    documented = {
        " ".join(statement.split())
        for statement in re.findall(r"^(GRANT [^;]+);", page, re.M | re.S)
    }
    tested = {
        " ".join(grant.format(role="chronos_node", database="chronos").split())
        for grant in NODE_GRANTS
    }
    assert documented == tested
