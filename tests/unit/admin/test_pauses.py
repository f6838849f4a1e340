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
    with caplog.at_level(logging.WARNING, "chronos.admin.flow.api"):
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


LIMITS = "/admin/v1/limits"


def test_set_list_replace_and_clear_a_limit() -> None:
    h = AdminHarness()
    status, _, limit = h.call("POST", LIMITS, "topic=billing&per_second=200")
    assert status == 200
    validate(limit, "Limit")
    assert (limit["kind"], limit["name"], limit["per_second"]) == ("topic", "billing", 200)
    assert h.call("POST", LIMITS, "tenant=acme&per_second=5")[0] == 200
    assert h.call("POST", LIMITS, "topic=billing&per_second=100")[2]["per_second"] == 100
    status, _, listing = h.call("GET", LIMITS)
    validate(listing, "LimitList")
    assert [(x["name"], x["per_second"]) for x in listing["limits"]] == [
        ("acme", 5),
        ("billing", 100),
    ]
    assert h.call("DELETE", LIMITS, "topic=billing")[0] == 200
    assert h.call("DELETE", LIMITS, "topic=billing")[0] == 404
    assert [x.name for x in h.store.limits()] == ["acme"]


@pytest.mark.parametrize(
    "query", ["topic=b", "topic=b&per_second=0", "topic=b&per_second=x", "per_second=5"]
)
def test_a_limit_needs_a_target_and_a_positive_rate(query: str) -> None:
    assert AdminHarness().call("POST", LIMITS, query)[0] == 400


def test_the_read_only_token_cannot_set_a_limit() -> None:
    h = AdminHarness(admin_read_token=Secret("read-token"))
    reader = {"Authorization": "Bearer read-token"}
    assert h.call("POST", LIMITS, "topic=b&per_second=5", headers=reader)[0] == 403
    assert h.call("GET", LIMITS, headers=reader)[0] == 200


def test_the_cli_limits(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, node, "limit", "--topic", "billing", "--per-second", "200")
    assert status == 0 and "limited topic 'billing' to 200 per second" in out
    status, out, _ = run(capsys, node, "limits")
    assert status == 0 and "PER_SECOND" in out and "billing" in out
    status, out, _ = run(capsys, node, "limit", "--topic", "billing", "--clear")
    assert status == 0 and "removed" in out
    status, out, _ = run(capsys, node, "limits")
    assert "no rate limits" in out
    with pytest.raises(SystemExit):
        run(capsys, node, "limit", "--topic", "billing", "--per-second", "0")
