"""The admin API's messages over HTTP on the real Postgres: one message with its state, bytes and
headers; the list, its pages, filters and refused parameters."""

from __future__ import annotations

import base64
import dataclasses
import uuid
from datetime import UTC, datetime, timedelta, timezone
from urllib.parse import quote, urlencode

import pytest

from chronos.recurrence import Rule
from tests.integration.admin_api import (
    PARK,
    Api,
    claim,
    list_all,
    message,
    seed,
    seed_states,
)

pytestmark = pytest.mark.integration


def test_get_message_shows_state_bytes_and_headers(api: Api) -> None:
    deadline = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    headers = [("trace", b"\x00\xffbin"), ("empty", None), ("trace", b"second")]
    odd_id = "tenant/a b?c#d%é"
    seed(
        api,
        [
            message("m1", deadline, key=b"\x01key", value=b"\x00" * 1000, headers=headers),
            message("tomb", deadline, key=None, value=None),
            message(odd_id, deadline),
        ],
    )
    status, body = api.get("/admin/v1/messages/m1")
    assert status == 200
    assert body == {
        "id": "m1",
        "state": "waiting",
        "deadline": "2031-05-06T07:08:09.123456Z",
        "readied_at": None,
        "claimed_by": None,
        "attempts": 0,
        "last_error": None,
        "target_topic": None,
        "tenant": "",
        "expires_ms": None,
        "enqueued_at": body["enqueued_at"],
        "key": base64.b64encode(b"\x01key").decode(),
        "key_text": None,
        "headers": [
            {"name": "trace", "value": base64.b64encode(b"\x00\xffbin").decode(), "text": None},
            {"name": "empty", "value": None, "text": None},
            {"name": "trace", "value": base64.b64encode(b"second").decode(), "text": "second"},
        ],
        "value_size": 1000,
        "recurrence": None,
        "value_preview": {"hex": "00" * 1000, "truncated": False},
        "history": [],  # it never ended before
    }
    status, body = api.get("/admin/v1/messages/m1?include_value=true")
    assert base64.b64decode(body["value"]) == b"\x00" * 1000
    status, body = api.get("/admin/v1/messages/tomb?include_value=true")
    assert (body["key"], body["value"], body["value_size"]) == (None, None, None)
    status, body = api.get("/admin/v1/messages/" + quote(odd_id, safe=""))
    assert status == 200 and body["id"] == odd_id

    status, body = api.get("/admin/v1/messages/absent")
    assert status == 404 and "absent" in body["error"]
    for bad in ("x" * 129, "a%00b", "%ff%fe"):
        status, body = api.get("/admin/v1/messages/" + bad)
        assert status == 400, bad
    for bad_query in (
        "include_value=yes",
        "include_value=1",
        "include_valu=true",
        "include_value=1&include_value=0",
    ):
        assert api.get("/admin/v1/messages/m1?" + bad_query)[0] == 400


def test_message_states_waiting_claimed_parked(api: Api) -> None:
    s = seed_states(api)
    for ids, state in ((s.waiting, "waiting"), (s.claimed, "claimed"), (s.parked, "parked")):
        for message_id in ids:
            status, body = api.get(f"/admin/v1/messages/{message_id}")
            assert status == 200
            assert body["state"] == state, message_id
    _, claimed = api.get("/admin/v1/messages/m7")
    assert claimed["claimed_by"] == s.claimer and claimed["readied_at"] is not None
    _, parked = api.get("/admin/v1/messages/m9")
    assert (parked["attempts"], parked["last_error"]) == (PARK, "MSG_SIZE_TOO_LARGE")


def test_list_pages_by_deadline_then_id_without_gaps_or_repeats(api: Api) -> None:
    base = datetime.now(UTC) + timedelta(hours=2)
    # 3 deadlines shared by several ids each: ties must page by id.
    ids = [f"p{i:02d}" for i in range(23)]
    seed(api, [message(i, base + timedelta(seconds=n % 3)) for n, i in enumerate(ids)])
    claim(api, str(uuid.uuid4()), ["p04", "p05"])
    expected = sorted(
        ((base + timedelta(seconds=n % 3), i) for n, i in enumerate(ids)),
    )
    for limit in (1, 2, 5, 7, 1000):
        got = list_all(api, {"limit": limit})
        assert [m["id"] for m in got] == [i for _, i in expected], limit
    waiting = list_all(api, {"state": "waiting", "limit": 4})
    assert {m["id"] for m in waiting} == set(ids) - {"p04", "p05"}
    claimed = list_all(api, {"state": "claimed", "limit": 1})
    assert [m["id"] for m in claimed] == sorted(
        ["p04", "p05"], key=lambda i: (base + timedelta(seconds=ids.index(i) % 3), i)
    )
    assert all("value" not in m and m["value_size"] == 5 for m in got)

    start, end = base + timedelta(seconds=1), base + timedelta(seconds=2)
    ranged = list_all(
        api, {"deadline_from": start.isoformat(), "deadline_to": end.isoformat(), "limit": 3}
    )
    assert {m["id"] for m in ranged} == {i for n, i in enumerate(ids) if n % 3 == 1}
    # Any offset; an instant without one is refused rather than guessed.
    shifted = start.astimezone(timezone(timedelta(hours=-3))).isoformat()
    zulu = end.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert {m["id"] for m in list_all(api, {"deadline_from": shifted, "deadline_to": zulu})} == {
        m["id"] for m in ranged
    }
    naive = start.replace(tzinfo=None).isoformat()
    assert api.get("/admin/v1/messages?" + urlencode({"deadline_from": naive}))[0] == 400


def test_list_filters_parked(api: Api) -> None:
    s = seed_states(api)
    parked = list_all(api, {"state": "parked", "limit": 1})
    assert [m["id"] for m in parked] == s.parked
    assert all(m["state"] == "parked" for m in parked)
    everything = list_all(api, {})
    assert len(everything) == 11
    assert {m["id"]: m["state"] for m in everything}["m10"] == "parked"


@pytest.mark.parametrize(
    "bad",
    [
        "limit=0",
        "limit=1001",
        "limit=abc",
        "limit=-1",
        "limit=1.5",
        "limit=",
        "limit=1_0",
        "state=ready",
        "state=",
        "deadline_from=yesterday",
        "deadline_from=2026-01-01",
        "deadline_to=2026-01-01T00:00:00",
        "deadline_to=2026-13-01T00:00:00Z",
        "deadline_from=",
        "cursor=garbage",
        "cursor=",
        "cursor=" + "A" * 2000,
        "cursor=" + base64.urlsafe_b64encode(b'{"v":1,"d":"x","i":"y"}').decode(),
        "cursor="
        + base64.urlsafe_b64encode(b'{"v":2,"d":"2026-01-01T00:00:00Z","i":"y"}').decode(),
        "unknown=1",
        "limit=1&limit=2",
    ],
)
def test_list_rejects_bad_parameters(api: Api, bad: str) -> None:
    status, body = api.get("/admin/v1/messages?" + bad)
    assert status == 400, bad
    assert body["error"]


def test_a_recurring_message_shows_its_rule_and_its_next_occurrence(api: Api) -> None:
    until = datetime(2031, 12, 31, tzinfo=UTC)
    rule = Rule(cron="0 9 * * 1-5", zone="Europe/Paris", until=until)
    first = datetime(2031, 5, 6, 7, 0, tzinfo=UTC)  # Tuesday 09:00 in Paris (UTC+2)
    seed(
        api,
        [
            dataclasses.replace(message("daily", first), recurrence=rule.encode()),
            message("once", first),
        ],
    )
    status, body = api.get("/admin/v1/messages/daily")
    assert status == 200
    assert body["deadline"] == "2031-05-06T07:00:00Z"  # the next occurrence
    assert body["recurrence"] == {
        "rule": "cron '0 9 * * 1-5' in Europe/Paris until 2031-12-31T00:00:00+00:00",
        "every_ms": None,
        "cron": "0 9 * * 1-5",
        "time_zone": "Europe/Paris",
        "until": "2031-12-31T00:00:00Z",
        "missed": "latest",
        "next": [  # the next occurrences, weekdays at 09:00 in Paris
            "2031-05-06T07:00:00Z",
            "2031-05-07T07:00:00Z",
            "2031-05-08T07:00:00Z",
            "2031-05-09T07:00:00Z",
            "2031-05-12T07:00:00Z",
        ],
    }
    status, page = api.get("/admin/v1/messages?" + urlencode({"limit": 10}))
    assert {m["id"]: m["recurrence"] is not None for m in page["messages"]} == {
        "daily": True,
        "once": False,
    }
    # A cancel through the API ends the series (a waiting one is deleted).
    status, _, _ = api.request("DELETE", "/admin/v1/messages/daily")
    assert status == 204
    status, _ = api.get("/admin/v1/messages/daily")
    assert status == 404


def test_an_admin_cancel_of_a_claimed_series_makes_that_occurrence_its_last(api: Api) -> None:
    every = Rule(every_ms=60_000).encode()
    deadline = datetime.now(UTC) + timedelta(seconds=1)
    seed(api, [dataclasses.replace(message("tick", deadline), recurrence=every)])
    node = str(uuid.uuid4())
    (row,) = api.store.claim(node, 5_000, 10, PARK)
    status, _, body = api.request("DELETE", "/admin/v1/messages/tick")
    assert status == 202 and body["claimed"] is True, body  # applied: its firing goes on
    assert "a series ends with it" in body["detail"], body
    status, record = api.get("/admin/v1/messages/tick")
    assert (record["state"], record["recurrence"]) == ("claimed", None)
    # The node fires the occurrence and advances it: the row is deleted instead.
    assert api.store.delete_fired(
        node, [(row.id, row.readied_at)], [deadline + timedelta(minutes=1)]
    ) == {"tick"}
    status, _ = api.get("/admin/v1/messages/tick")
    assert status == 404
