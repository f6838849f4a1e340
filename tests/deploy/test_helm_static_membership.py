"""The chart's static consumer-group membership: CHRONOS_GROUP_INSTANCE_ID from the pod name."""

from __future__ import annotations

from tests.deploy.helm_support import KUBE_VERSIONS, containers, render, validate


def _env(values: dict[str, object] | None) -> list[dict[str, object]]:
    (container,) = containers(render(values).one("Deployment"))
    return list(container.get("env", []))


def test_dynamic_membership_by_default() -> None:
    assert not any(e["name"] == "CHRONOS_GROUP_INSTANCE_ID" for e in _env(None))


def test_static_membership_uses_the_pod_name() -> None:
    rendered = render({"staticMembership": True})
    (container,) = containers(rendered.one("Deployment"))
    (env,) = [e for e in container["env"] if e["name"] == "CHRONOS_GROUP_INSTANCE_ID"]
    assert env["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    for version in KUBE_VERSIONS:
        validate(rendered.one("Deployment"), version)
