"""Offline rendering and validation of the Helm chart, for the deployment tests.

* Rendering and linting use Helm itself, linked as a library: the ``helm-python-sdk`` package
  (import name ``helm_python``) binds Helm v4's Go SDK through ctypes. No helm binary, cluster or
  network is involved.
* Built-in kinds are validated with ``kubernetes-validate``, which ships the Kubernetes OpenAPI
  schemas per minor version; the strict variant also rejects unknown fields (typos).
* The custom resources (KEDA ScaledObject / TriggerAuthentication, Prometheus Operator
  ServiceMonitor) have no schema there; CRD_SCHEMAS below encodes the parts of their CRDs the
  chart uses, strictly, so a misspelt or mistyped field still fails.
"""

from __future__ import annotations

import base64
import copy
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "helm" / "chronos"

RELEASE = "chronos"
NAMESPACE = "scheduling"


def _oldest_supported_kube_version() -> str:
    """The version in Chart.yaml's kubeVersion: ">=1.27.0-0" -> "1.27.0"."""
    constraint = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())["kubeVersion"]
    match = re.fullmatch(r">=\s*v?(\d+\.\d+\.\d+)(-0)?", constraint.strip())
    assert match, f"unexpected kubeVersion constraint {constraint!r}"
    return match.group(1)


# The oldest Kubernetes the chart supports and the newest the installed kubernetes-validate ships
# schemas for (1.37 with kubernetes-validate 1.37).
KUBE_VERSIONS = (_oldest_supported_kube_version(), kubernetes_validate.latest_version())

# The values every real install has to give (the chart refuses to render without them).
MINIMAL_VALUES: dict[str, Any] = {
    "config": {"CHRONOS_KAFKA_BOOTSTRAP_SERVERS": "kafka-0.kafka:9092,kafka-1.kafka:9092"},
    "secrets": {"databaseUrl": "postgresql://chronos:s3cr3t-db-pass@postgres:5432/chronos"},
}


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep merge of values dictionaries (override wins), as helm does with -f files."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class Rendered:
    """The output of one render: raw text per template and the parsed manifests."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files
        self.notes = next((text for name, text in files.items() if name.endswith("NOTES.txt")), "")
        self.manifests: list[dict[str, Any]] = []
        for name, text in sorted(files.items()):
            if name.endswith("NOTES.txt"):
                continue
            for doc in yaml.safe_load_all(text):
                if doc:
                    self.manifests.append(doc)

    @property
    def text(self) -> str:
        """Everything helm would print, NOTES included."""
        return "\n".join(self.files.values())

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.manifests if m["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [m for m in self.of_kind(kind) if name is None or m["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
        return found[0]

    def kinds(self) -> list[str]:
        return sorted(m["kind"] for m in self.manifests)


def render(values: Mapping[str, Any] | None = None, *, minimal: bool = True) -> Rendered:
    """Render the chart as `helm install` would. ``minimal`` merges MINIMAL_VALUES underneath."""
    given = merge(MINIMAL_VALUES, values or {}) if minimal else dict(values or {})
    with helm.Chart.load(CHART_DIR) as chart:
        # Like helm install, render() checks the values against values.schema.json first.
        return Rendered(
            chart.render(values=given, name=RELEASE, namespace=NAMESPACE, is_install=True)
        )


def lint(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return helm.lint(CHART_DIR, dict(values) if values is not None else None, strict=True)


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------

_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"matchLabels": _STR_MAP, "matchExpressions": {"type": "array"}},
}
_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
        "namespace": {"type": "string"},
        "labels": _STR_MAP,
        "annotations": _STR_MAP,
    },
}
_DURATION = {"type": "string", "pattern": "^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}


def _resource(api_version: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": api_version},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
    }


# Subsets of the CRDs' openAPIV3Schema (KEDA 2.x keda.sh/v1alpha1, Prometheus Operator
# monitoring.coreos.com/v1): the fields the chart renders, with their real types.
CRD_SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("keda.sh/v1alpha1", "ScaledObject"): _resource(
        "keda.sh/v1alpha1",
        "ScaledObject",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["scaleTargetRef", "triggers"],
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string"},
                        "envSourceContainerName": {"type": "string"},
                    },
                },
                "pollingInterval": {"type": "integer", "format": "int32"},
                "cooldownPeriod": {"type": "integer", "format": "int32"},
                "idleReplicaCount": {"type": "integer", "format": "int32"},
                "minReplicaCount": {"type": "integer", "format": "int32"},
                "maxReplicaCount": {"type": "integer", "format": "int32"},
                "fallback": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["failureThreshold", "replicas"],
                    "properties": {
                        "failureThreshold": {"type": "integer"},
                        "replicas": {"type": "integer"},
                    },
                },
                "advanced": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string"},
                                "behavior": {"type": "object"},
                            },
                        },
                    },
                },
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["type", "metadata"],
                        "properties": {
                            "type": {"type": "string"},
                            "name": {"type": "string"},
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "useCachedMetrics": {"type": "boolean"},
                            # KEDA rejects non-string metadata values.
                            "metadata": _STR_MAP,
                            "authenticationRef": {
                                "type": "object",
                                "additionalProperties": False,
                                "required": ["name"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "kind": {"type": "string"},
                                },
                            },
                        },
                    },
                },
            },
        },
    ),
    ("keda.sh/v1alpha1", "TriggerAuthentication"): _resource(
        "keda.sh/v1alpha1",
        "TriggerAuthentication",
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "secretTargetRef": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["parameter", "name", "key"],
                        "properties": {
                            "parameter": {"type": "string"},
                            "name": {"type": "string"},
                            "key": {"type": "string"},
                        },
                    },
                },
            },
        },
    ),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _resource(
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector"],
            "properties": {
                "selector": _LABEL_SELECTOR,
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "jobLabel": {"type": "string"},
                "endpoints": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "honorLabels": {"type": "boolean"},
                        },
                    },
                },
            },
        },
    ),
}


def validate(manifest: dict[str, Any], kube_version: str) -> None:
    """Raise if the manifest does not validate (built-in kinds: against Kubernetes' own schema)."""
    key = (manifest.get("apiVersion"), manifest.get("kind"))
    try:
        if key in CRD_SCHEMAS:
            jsonschema.Draft202012Validator(CRD_SCHEMAS[key]).validate(manifest)
        else:
            kubernetes_validate.validate(manifest, kube_version, strict=True)
    except jsonschema.ValidationError as error:
        # The default message embeds the whole schema; name the object, the field and the rule.
        where = ".".join(str(p) for p in error.absolute_path) or "<root>"
        what = f"{manifest['kind']}/{manifest['metadata']['name']}"
        raise AssertionError(
            f"{what} is invalid for Kubernetes {kube_version} at {where}: {error.message}"
        ) from None


# --------------------------------------------------------------------------------------------
# Walking pod specs
# --------------------------------------------------------------------------------------------


def pod_spec(workload: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(workload)
    return list(spec.get("initContainers", [])) + list(spec["containers"])


def secret_refs(workload: dict[str, Any]) -> Iterator[str]:
    """Names of the Secrets a workload's containers read (envFrom and valueFrom)."""
    for container in containers(workload):
        for source in container.get("envFrom", []):
            if "secretRef" in source:
                yield source["secretRef"]["name"]
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                yield ref["name"]


def secret_payload(secret: dict[str, Any]) -> dict[str, str]:
    """A Secret's plain key -> value, from data (base64) and stringData."""
    out = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    out.update(secret.get("stringData") or {})
    return out


def hook_events(manifest: dict[str, Any]) -> set[str]:
    annotations = manifest["metadata"].get("annotations") or {}
    return {e.strip() for e in annotations.get("helm.sh/hook", "").split(",") if e.strip()}


def hook_weight(manifest: dict[str, Any]) -> int:
    return int((manifest["metadata"].get("annotations") or {}).get("helm.sh/hook-weight", "0"))
