"""GET /admin/v1/messages by filter (chronos.admin.messages.filters), its count, and a
message's whole record (chronos.admin.messages.views)."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest

from chronos.admin.messages import views
from chronos.protocol import ScheduledMessage
from chronos.recurrence import Rule
from tests.unit.admin.helpers import AdminHarness, validate


def _seeded() -> AdminHarness:
    h = AdminHarness()
    base = h.clock.now() + timedelta(minutes=5)
    h.store.enqueue(
        [
            ScheduledMessage("acme-1", base, b"user:1", b"hello", [("h", b"\x00")], tenant="acme"),
            ScheduledMessage(
                "acme-2", base + timedelta(seconds=1), b"\xff\xfe", b"\x00\x01", [], tenant="acme"
            ),
            ScheduledMessage(
                "beta-1",
                base + timedelta(seconds=2),
                b"user:2",
                b"v",
                [],
                target_topic="other",
                tenant="beta",
            ),
            ScheduledMessage(
                "tick",
                base + timedelta(seconds=3),
                None,
                b"v",
                [],
                recurrence=Rule(every_ms=60_000).encode(),
                expires_ms=5_000,
            ),
        ],
        0,
    )
    return h


def _ids(h: AdminHarness, **params: Any) -> list[str]:
    status, _, body = h.call("GET", "/admin/v1/messages", urlencode(params))
    assert status == 200, body
    validate(body, "MessagePage")
    return [m["id"] for m in body["messages"]]


def test_the_list_filters_by_each_parameter() -> None:
    h = _seeded()
    assert _ids(h, tenant="acme") == ["acme-1", "acme-2"]
    assert _ids(h, topic="other") == ["beta-1"]
    output = h.settings.output_topic
    assert _ids(h, topic=output) == ["acme-1", "acme-2", "tick"]  # no topic of their own
    assert _ids(h, id_prefix="acme-") == ["acme-1", "acme-2"]
    assert _ids(h, key="user:1") == ["acme-1"]
    assert _ids(h, key="user:", key_prefix="true") == ["acme-1", "beta-1"]
    assert _ids(h, key_base64=base64.b64encode(b"\xff").decode(), key_prefix="true") == ["acme-2"]
    assert _ids(h, recurring="true") == ["tick"]
    assert _ids(h, recurring="false", state="waiting") == ["acme-1", "acme-2", "beta-1"]
    assert _ids(h, tenant="acme", deadline_from="2030-01-01T00:05:01Z") == ["acme-2"]


@pytest.mark.parametrize(
    "query",
    [
        {"key": "a", "key_base64": "YQ=="},
        {"key_base64": "not base64!"},
        {"key_prefix": "true"},
        {"recurring": "yes"},
        {"id_prefix": ""},
        {"state": "ready"},
        {"count": "1"},
    ],
)
def test_a_bad_filter_is_a_400(query: dict[str, str]) -> None:
    status, _, body = _seeded().call("GET", "/admin/v1/messages", urlencode(query))
    assert status == 400 and body["error"]


def test_the_count_is_exact_and_says_so() -> None:
    h = _seeded()
    status, _, body = h.call("GET", "/admin/v1/messages", "tenant=acme&count=true&limit=1")
    assert status == 200
    validate(body, "MessagePage")
    assert (len(body["messages"]), body["count"], body["count_exact"]) == (1, 2, True)
    assert body["next_cursor"]
    assert "count" not in h.call("GET", "/admin/v1/messages")[2]


def test_keys_and_headers_are_shown_as_text_when_printable() -> None:
    h = _seeded()
    listed = {m["id"]: m for m in h.call("GET", "/admin/v1/messages")[2]["messages"]}
    assert (listed["acme-1"]["key"], listed["acme-1"]["key_text"]) == ("dXNlcjox", "user:1")
    assert listed["acme-2"]["key_text"] is None  # not UTF-8
    assert listed["acme-1"]["headers"] == [{"name": "h", "value": "AA==", "text": None}]
    assert views.printable(b"tab\tok") == "tab\tok"
    assert views.printable(b"esc\x1b[2J") is None


def test_a_message_whole_record() -> None:
    h = _seeded()
    status, _, body = h.call("GET", "/admin/v1/messages/acme-1")
    assert status == 200
    validate(body, "Message")
    assert body["tenant"] == "acme" and body["value_preview"] == {
        "text": "hello",
        "truncated": False,
    }
    assert "value" not in body
    binary = h.call("GET", "/admin/v1/messages/acme-2")[2]
    assert binary["value_preview"] == {"hex": "0001", "truncated": False}
    tick = h.call("GET", "/admin/v1/messages/tick")[2]
    validate(tick, "Message")
    assert tick["expires_ms"] == 5_000
    assert tick["recurrence"]["next"] == [
        "2030-01-01T00:05:03Z",
        "2030-01-01T00:06:03Z",
        "2030-01-01T00:07:03Z",
        "2030-01-01T00:08:03Z",
        "2030-01-01T00:09:03Z",
    ]


def test_a_long_value_preview_is_cut_and_says_so() -> None:
    preview = views.value_preview("é".encode() * 1000)
    assert preview is not None and preview["truncated"] is True
    assert preview["text"] == "é" * 512
    assert views.value_preview(b"\x00" * 2000) == {"hex": "00" * 1024, "truncated": True}
