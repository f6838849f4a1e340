"""The Helm chart's migration hook: a pre-install and pre-upgrade Job that needs nothing of the
release."""

from __future__ import annotations

from tests.deploy.helm_support import (
    containers,
    hook_events,
    pod_spec,
    render,
)
from tests.deploy.helm_values import (
    SCENARIOS,
    deployment,
    migration_job,
)

# ----------------------------------------------------------------------------------------------
# Migration hook
# ----------------------------------------------------------------------------------------------


def test_migration_job_is_a_pre_install_pre_upgrade_hook() -> None:
    job = migration_job(render())
    annotations = job["metadata"]["annotations"]
    assert hook_events(job) == {"pre-install", "pre-upgrade"}
    assert set(annotations["helm.sh/hook-delete-policy"].split(",")) == {
        "before-hook-creation",
        "hook-succeeded",
    }
    (container,) = containers(job)
    assert container["args"] == ["migrate"]
    assert pod_spec(job)["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] >= 0
    assert job["spec"]["activeDeadlineSeconds"] > 0


def test_migration_job_does_not_need_release_resources() -> None:
    """At pre-install only hooks exist: the Job must not name the chart's ServiceAccount."""
    rendered = render()
    assert "serviceAccountName" not in pod_spec(migration_job(rendered))
    assert pod_spec(deployment(rendered))["serviceAccountName"] == "chronos"
    tuned = render(
        SCENARIOS["existing-secret"] | {"serviceAccount": {"create": False, "name": "ci"}}
    )
    assert pod_spec(migration_job(tuned))["serviceAccountName"] == "ci"


def test_only_the_migration_objects_are_hooks() -> None:
    rendered = render(SCENARIOS["keda-sasl-prometheus"])
    hooks = sorted((m["kind"], m["metadata"]["name"]) for m in rendered.manifests if hook_events(m))
    assert hooks == [("Job", "chronos-migrate"), ("Secret", "chronos-migrate")]


def test_migrations_can_be_disabled() -> None:
    rendered = render(SCENARIOS["tuned"])
    assert "Job" not in rendered.kinds()
    assert all(not hook_events(m) for m in rendered.manifests)
