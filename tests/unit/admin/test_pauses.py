"""``/admin/v1/pauses``: pause and resume a tenant or a target topic (stored, with when and by
whom), list them, refuse the read-only token, and ``chronos admin pause/resume/pauses``."""

from __future__ import annotations

import logging

import pytest

from chronos.config.settings import Secret
from chronos.store import PauseKind
from tests.unit.admin.helpers import AdminHarness, validate
from tests.unit.admin.test_cli import Node, as_json, node, run

__all__ = ["node"]  # the CLI's fixture: a node's real HTTP server on the in-memory store

PATH = "/admin/v1/pauses"


def test_pause_list_and_resume_a_tenant_and_a_topic(caplog: pytest.LogCaptureFixture) -> None:
    h = AdminHarness()
    with caplog.at_level(logging.WARNING, "chronos.admin.flow"):
        status, _, paused = h.call("POST", PATH, "tenant=acme")
    assert status == 200
    validate(paused, "Pause")
    assert (paused["kind"], paused["name"]) == ("tenant", "acme")
    assert paused["paused_by"].startswith("admin token from")
    assert "paused by the admin token" in caplog.text
    assert h.call("POST", PATH, "topic=billing")[0] == 200
    status, _, listing = h.call("GET", PATH)
    assert status == 200
    validate(listing, "PauseList")
    assert [(p["kind"], p["name"]) for p in listing["pauses"]] == [
        ("tenant", "acme"),
        ("topic", "billing"),
    ]
    assert [p.name for p in h.store.pauses()] == ["acme", "billing"]
    status, _, resumed = h.call("DELETE", PATH, "tenant=acme")
    assert status == 200 and resumed == paused
    assert h.call("DELETE", PATH, "tenant=acme")[0] == 404
    assert [(p.kind, p.name) for p in h.store.pauses()] == [(PauseKind.TOPIC, "billing")]


def test_the_default_tenant_is_the_empty_name() -> None:
    h = AdminHarness()
    status, _, paused = h.call("POST", PATH, "tenant=")
    assert status == 200 and paused["name"] == ""


@pytest.mark.parametrize(
    "query", ["", "tenant=a&topic=b", "topic=", "other=x", "tenant=" + "x" * 129]
)
def test_exactly_one_target_is_named(query: str) -> None:
    assert AdminHarness().call("POST", PATH, query)[0] == 400


def test_the_read_only_token_lists_but_cannot_pause() -> None:
    h = AdminHarness(admin_read_token=Secret("read-token"))
    reader = {"Authorization": "Bearer read-token"}
    assert h.call("POST", PATH, "tenant=acme", headers=reader)[0] == 403
    assert h.call("DELETE", PATH, "tenant=acme", headers=reader)[0] == 403
    assert h.store.pauses() == []
    assert h.call("GET", PATH, headers=reader)[0] == 200
    assert h.call("PUT", PATH, "tenant=acme")[0] == 405


def test_the_cli_pauses_lists_and_resumes(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, node, "pauses")
    assert status == 0 and "nothing is paused" in out
    status, out, _ = run(capsys, node, "pause", "--topic", "billing")
    assert status == 0 and "paused topic 'billing'" in out
    status, out, _ = run(capsys, node, "pause", "--tenant", "")
    assert status == 0
    status, out, _ = run(capsys, node, "pauses")
    assert status == 0 and "billing" in out and "PAUSED_BY" in out
    status, out, _ = run(capsys, node, "pauses", "--json")
    assert [p["name"] for p in as_json(out)["pauses"]] == ["billing", ""]
    status, out, _ = run(capsys, node, "resume", "--topic", "billing")
    assert status == 0 and "resumed topic 'billing'" in out
    status, _, err = run(capsys, node, "resume", "--topic", "billing")
    assert status == 1 and "404" in err and "not paused" in err
