"""Finding messages and acting on many over HTTP on the real Postgres: the list's filters and
count, a message's whole record, bulk cancel (dry run first, claimed rows, cancel markers) and
reschedule, the read-only token, and ``chronos admin`` against the node."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest

from chronos import cli
from chronos.config.settings import Secret
from chronos.protocol import ScheduledMessage
from chronos.recurrence import Rule
from chronos.store import Outcome
from tests.integration.admin_api import PARK, Api, claim, seed

pytestmark = pytest.mark.integration

READER = "read-only-s3cret"


def _seed(api: Api) -> datetime:
    base = datetime.now(UTC) + timedelta(hours=1)
    seed(
        api,
        [
            ScheduledMessage(
                f"camp-{i}", base + timedelta(seconds=i), b"user:%d" % i, b"hi", [], tenant="acme"
            )
            for i in range(5)
        ]
        + [
            ScheduledMessage(
                "other-1",
                base,
                b"\xff\x00",
                b"\x00\x01",
                [("h", b"x")],
                target_topic="elsewhere",
                tenant="beta",
            ),
            ScheduledMessage(
                "tick",
                base,
                None,
                b"v",
                [],
                recurrence=Rule(every_ms=3_600_000).encode(),
                expires_ms=60_000,
            ),
        ],
    )
    return base


def _ids(api: Api, **params: Any) -> list[str]:
    status, body = api.get("/admin/v1/messages?" + urlencode(params))
    assert status == 200, body
    return [m["id"] for m in body["messages"]]


def test_the_list_filters_and_counts_on_postgres(api: Api) -> None:
    _seed(api)
    assert _ids(api, tenant="acme", limit=2) == ["camp-0", "camp-1"]
    assert _ids(api, topic="elsewhere") == ["other-1"]
    assert _ids(api, id_prefix="camp-3") == ["camp-3"]
    assert _ids(api, key="user:4") == ["camp-4"]
    assert _ids(api, key="user:", key_prefix="true", limit=3) == ["camp-0", "camp-1", "camp-2"]
    assert _ids(api, key_base64="/w==", key_prefix="true") == ["other-1"]
    assert _ids(api, recurring="true") == ["tick"]
    status, body = api.get("/admin/v1/messages?tenant=acme&count=true&limit=1")
    assert (body["count"], body["count_exact"], len(body["messages"])) == (5, True, 1)
    status, record = api.get("/admin/v1/messages/tick")
    assert status == 200
    assert (record["tenant"], record["expires_ms"]) == ("", 60_000)
    assert len(record["recurrence"]["next"]) == 5
    _, other = api.get("/admin/v1/messages/other-1")
    assert other["value_preview"] == {"hex": "0001", "truncated": False}
    assert (other["key"], other["key_text"], other["target_topic"]) == ("/wA=", None, "elsewhere")


def test_a_count_past_its_limit_is_an_estimate_marked_as_one(api: Api) -> None:
    # 30,000 rows, 22,500 of tenant acme: past the exact count's limit (10,000), the list
    # answers an estimate, marked as one, near the truth (not the limit as a lower bound).
    base = datetime.now(UTC) + timedelta(hours=1)
    for start in range(0, 30_000, 5_000):
        seed(
            api,
            [
                ScheduledMessage(
                    f"many-{i:05}",
                    base + timedelta(milliseconds=i),
                    b"k",
                    b"v",
                    [],
                    tenant="acme" if i % 4 else "beta",
                )
                for i in range(start, start + 5_000)
            ],
        )
    api.sql("ANALYZE chronos_messages")  # as autovacuum would have by now
    status, body = api.get("/admin/v1/messages?tenant=acme&count=true&limit=1")
    assert status == 200, body
    assert body["count_exact"] is False
    assert 17_000 <= body["count"] <= 28_000, body["count"]
    status, body = api.get("/admin/v1/messages?tenant=beta&count=true&limit=1")
    assert (body["count"], body["count_exact"]) == (7_500, True)


def test_bulk_cancel_dry_run_first_then_claimed_rows_fire_and_markers_block(api: Api) -> None:
    _seed(api)
    claim(api, str(uuid.uuid4()), ["camp-0"])
    status, _, dry = api.request("POST", "/admin/v1/bulk/cancel?tenant=acme&dry_run=true")
    assert status == 200 and (dry["matched"], dry["matched_exact"]) == (5, True)
    assert len(_ids(api, tenant="acme")) == 5
    status, _, done = api.request("POST", "/admin/v1/bulk/cancel?tenant=acme")
    assert status == 200, done
    assert (done["cancelled"], done["claimed"], done["complete"]) == (4, 1, True)
    assert _ids(api, tenant="acme") == ["camp-0"]  # claimed: left to fire
    markers = api.sql("SELECT id FROM chronos_cancels WHERE id LIKE 'camp-%%' ORDER BY id")
    assert [m[0] for m in markers] == [f"camp-{i}" for i in range(5)]
    late = ScheduledMessage("camp-2", datetime.now(UTC) + timedelta(hours=2), None, b"v", [])
    assert api.store.enqueue([late], 0) == [Outcome.BLOCKED]  # as after a Kafka cancel
    again = api.request("POST", "/admin/v1/bulk/cancel?tenant=acme")[2]
    assert (again["cancelled"], again["claimed"]) == (0, 1)  # safe to repeat


def test_bulk_reschedule_and_fire_now_on_postgres(api: Api) -> None:
    base = _seed(api)
    status, _, moved = api.request(
        "POST", "/admin/v1/bulk/reschedule?tenant=acme", body={"shift_ms": 86_400_000}
    )
    assert status == 200 and moved["rescheduled"] == 5
    _, first = api.get("/admin/v1/messages/camp-0")
    assert datetime.fromisoformat(first["deadline"]) == base + timedelta(days=1)
    status, _, fired = api.request(
        "POST", "/admin/v1/bulk/reschedule?id_prefix=camp-", body={"fire_now": True}
    )
    assert fired["rescheduled"] == 5
    rows = api.store.claim(str(uuid.uuid4()), 0, 100, PARK)
    assert sorted(r.id for r in rows) == [f"camp-{i}" for i in range(5)]


def test_the_read_only_token_reads_and_cannot_write(
    migrated_database_url: str, start_api: Callable[..., Api]
) -> None:
    api = start_api(migrated_database_url, admin_read_token=Secret(READER))
    _seed(api)
    assert api.get("/admin/v1/messages?tenant=acme", token=READER)[0] == 200
    assert api.get("/admin/v1/messages/tick", token=READER)[0] == 200
    for method, path, body in (
        ("DELETE", "/admin/v1/messages/tick", None),
        ("POST", "/admin/v1/bulk/cancel?tenant=acme", None),
        ("POST", "/admin/v1/bulk/reschedule?tenant=acme", {"fire_now": True}),
    ):
        status, _, answer = api.request(method, path, token=READER, body=body)
        assert status == 403 and "read-only" in answer["error"], path
    assert len(_ids(api, tenant="acme")) == 5


def test_the_cli_against_the_node(api: Api, capsys: pytest.CaptureFixture[str]) -> None:
    _seed(api)
    flags = ["--url", api.url, "--token", "s3cret-admin-token"]
    assert cli.main(["admin", "list", "--tenant", "acme", "--key-prefix", "user:", *flags]) == 0
    listed = capsys.readouterr().out
    assert "camp-4" in listed and "other-1" not in listed
    assert cli.main(["admin", "cancel", "--id-prefix", "camp-", "--dry-run", *flags]) == 0
    assert capsys.readouterr().out.strip() == "5 messages match"
    assert cli.main(["admin", "cancel", "--id-prefix", "camp-", *flags]) == 0
    assert capsys.readouterr().out.strip() == "cancelled 5"
