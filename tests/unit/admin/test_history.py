"""The history of ended messages through the admin API and ``chronos admin``: get answers for a
message that fired ("fired ... to orders[3]@18112, 3 ms after its deadline, by node ..."), list
takes the ended states with the list's filters and cursor, and the summary counts by tenant and
outcome over a window."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from chronos.protocol import ScheduledMessage
from chronos.store import Ending
from chronos.store.history import DEAD_LETTERED, FIRED
from tests.unit.admin.helpers import AdminHarness, validate
from tests.unit.admin.test_cli import Node, as_json, node, run

__all__ = ["node"]  # the CLI tests' node (a fixture)

WEEK = timedelta(days=7)


def _fire(
    h: AdminHarness, message_id: str, ending: Ending, tenant: str = "", key: bytes | None = b"k"
) -> str:
    me = str(uuid.uuid4())
    due = h.clock.now() + timedelta(seconds=1)
    h.store.enqueue([ScheduledMessage(message_id, due, key, b"v", [], tenant=tenant)], 0)
    h.clock.advance(1_000)
    rows = [r for r in h.store.claim(me, 0, 100, 4) if r.id == message_id]
    assert h.store.delete_fired(me, [(r.id, r.readied_at) for r in rows], None, [ending])
    return me


def test_get_answers_for_a_fired_message_how_and_where_it_fired() -> None:
    h = AdminHarness()
    h.store.maintain_history(WEEK)
    me = _fire(h, "order-1", Ending(FIRED, "orders", 3, 18112, 3, None))
    status, _, body = h.call("GET", "/admin/v1/messages/order-1")
    assert status == 200
    validate(body, "EndedMessage")
    assert body["summary"] == (
        f"fired 2030-01-01T00:00:01.003Z to orders[3]@18112, 3 ms after its deadline, by node {me}"
    )
    assert (body["state"], body["partition"], body["offset"]) == ("fired", 3, 18112)
    assert len(body["history"]) == 1
    status, _, body = h.call("GET", "/admin/v1/messages/never")
    assert status == 404 and "nor in the history" in body["error"]
    assert "CHRONOS_HISTORY_FIRED" not in body["error"]


def test_get_of_an_unknown_id_says_fired_messages_are_not_recorded_without_history_fired() -> None:
    h = AdminHarness(history_fired=False)
    status, _, body = h.call("GET", "/admin/v1/messages/fired-long-ago")
    assert status == 404 and body["error"] == (
        "message 'fired-long-ago' is not scheduled, nor in the history (fired messages are not "
        "recorded: CHRONOS_HISTORY_FIRED=false)"
    )
    status, _, body = AdminHarness(history_fired=False, history_ttl=timedelta(0)).call(
        "GET", "/admin/v1/messages/fired-long-ago"
    )
    assert status == 404 and "CHRONOS_HISTORY_FIRED" not in body["error"]  # no history at all


def test_get_of_a_waiting_message_shows_its_earlier_ends() -> None:
    h = AdminHarness()
    h.store.maintain_history(WEEK)
    _fire(h, "again", Ending(FIRED, "out", 0, 7, 1, None))
    h.store.enqueue(
        [ScheduledMessage("again", h.clock.now() + timedelta(hours=1), None, None, [])], 0
    )
    status, _, body = h.call("GET", "/admin/v1/messages/again")
    assert status == 200 and body["state"] == "waiting"
    validate(body, "Message")
    assert [r["offset"] for r in body["history"]] == [7]


def test_list_by_ended_state_pages_with_the_cursor_and_keeps_two_fires_together() -> None:
    h = AdminHarness()
    h.store.maintain_history(WEEK)
    for i in range(3):
        _fire(h, f"f{i}", Ending(FIRED, "out", 0, i, 1, None))
    _fire(h, "dl", Ending(DEAD_LETTERED, "dlq", 0, 0, 1, "publish_failed"), tenant="acme")
    status, _, page = h.call("GET", "/admin/v1/messages", "state=fired&limit=2")
    assert status == 200
    validate(page, "MessagePage")
    assert [m["id"] for m in page["messages"]] == ["f0", "f1"] and page["next_cursor"]
    rest = h.call("GET", "/admin/v1/messages", f"state=fired&limit=2&cursor={page['next_cursor']}")
    assert [m["id"] for m in rest[2]["messages"]] == ["f2"] and rest[2]["next_cursor"] is None
    acme = h.call("GET", "/admin/v1/messages", "state=ended&tenant=acme")[2]["messages"]
    assert [(m["id"], m["state"], m["reason"]) for m in acme] == [
        ("dl", "dead-lettered", "publish_failed")
    ]
    # Two records of one message at one deadline (fired twice) never straddle a page.
    me = str(uuid.uuid4())
    due = h.clock.now() + timedelta(seconds=1)
    for offset in (10, 11):
        h.store.enqueue([ScheduledMessage("dup", due, None, None, [])], 0)
        rows = h.store.claim(me, 2_000, 10, 4)
        h.store.delete_fired(
            me,
            [(r.id, r.readied_at) for r in rows],
            None,
            [Ending(FIRED, "out", 0, offset, 1, None)],
        )
    page = h.call("GET", "/admin/v1/messages", "state=fired&id_prefix=dup&limit=1")[2]
    assert [m["offset"] for m in page["messages"]] == [10, 11] or [
        m["offset"] for m in page["messages"]
    ] == [11, 10]
    assert page["next_cursor"] is None


def test_a_page_of_ended_messages_is_bounded_by_its_keys_bytes() -> None:
    """Keys of 1.5 MB: a page carries at most PAGE_MAX_BYTES (4 MiB) of them, two messages,
    and the cursor pages through every one once."""
    h = AdminHarness()
    h.store.maintain_history(WEEK)
    for i in range(5):
        _fire(h, f"big{i}", Ending(FIRED, "out", 0, i, 1, None), key=bytes(1_500_000))
    seen: list[list[str]] = []
    query = "state=fired&limit=100"
    while True:
        status, _, page = h.call("GET", "/admin/v1/messages", query)
        assert status == 200
        seen.append([m["id"] for m in page["messages"]])
        if page["next_cursor"] is None:
            break
        query = f"state=fired&limit=100&cursor={page['next_cursor']}"
    assert seen == [["big0", "big1"], ["big2", "big3"], ["big4"]]


def test_ended_messages_are_listed_by_key_exact_or_by_prefix_as_text_or_base64() -> None:
    h = AdminHarness()
    h.store.maintain_history(WEEK)
    _fire(h, "r1", Ending(FIRED, "out", 0, 1, 1, None), key=b"order-123")
    _fire(h, "r2", Ending(DEAD_LETTERED, "dlq", 0, 2, 1, "publish_failed"), key=b"order-124")
    _fire(h, "r3", Ending(FIRED, "out", 0, 3, 1, None), key=b"\x00\xff")
    _fire(h, "r4", Ending(FIRED, "out", 0, 4, 1, None), key=None)

    def ids(query: str) -> list[str]:
        status, _, page = h.call("GET", "/admin/v1/messages", query)
        assert status == 200, page
        validate(page, "MessagePage")
        return [m["id"] for m in page["messages"]]

    assert ids("state=fired&key=order-123") == ["r1"]
    assert ids("state=fired&key=order-124") == []  # dead-lettered, not fired
    assert ids("state=ended&key=order-12&key_prefix=true") == ["r1", "r2"]
    assert ids("state=dead-lettered&key=order-&key_prefix=true") == ["r2"]
    assert ids("state=fired&key_base64=AP8=") == ["r3"]
    assert ids("state=fired&key_base64=AA==&key_prefix=true") == ["r3"]
    assert ids("state=fired") == ["r1", "r3", "r4"]
    page = h.call("GET", "/admin/v1/messages", "state=fired&key=order-123")[2]
    assert (page["messages"][0]["key"], page["messages"][0]["key_text"]) == (
        "b3JkZXItMTIz",
        "order-123",
    )
    status, _, body = h.call("GET", "/admin/v1/messages/r3")
    assert status == 200
    validate(body, "EndedMessage")
    assert (body["key"], body["key_text"]) == ("AP8=", None)  # not printable: base64 only
    assert h.call("GET", "/admin/v1/messages/r4")[2]["key"] is None


@pytest.mark.parametrize(
    ("path", "method", "query", "word"),
    [
        ("/admin/v1/messages", "GET", "state=fired&key=k&key_base64=aw==", "key"),
        ("/admin/v1/messages", "GET", "state=gone", "state"),
        ("/admin/v1/bulk/cancel", "POST", "state=fired&tenant=a", "state"),
        ("/admin/v1/history/summary", "GET", "since=yesterday", "since"),
    ],
)
def test_bad_history_queries_are_400_naming_the_parameter(
    path: str, method: str, query: str, word: str
) -> None:
    status, _, body = AdminHarness().call(method, path, query)
    assert status == 400 and word in body["error"], body


def test_the_summary_counts_by_tenant_and_outcome_over_the_window() -> None:
    h = AdminHarness()
    h.store.maintain_history(WEEK)
    for i, late in enumerate((1, 3, 5)):
        _fire(h, f"a{i}", Ending(FIRED, "out", 0, i, late, None), tenant="acme")
    _fire(h, "b0", Ending(DEAD_LETTERED, "dlq", 0, 0, 1, "publish_failed"), tenant="beta")
    status, _, body = h.call("GET", "/admin/v1/history/summary", "since=1h")
    assert status == 200
    validate(body, "HistorySummary")
    rows = {t["tenant"]: t for t in body["tenants"]}
    assert (rows["acme"]["fired"], rows["acme"]["lateness_p50_ms"]) == (3, 3)
    assert rows["beta"]["dead_lettered"] == 1 and rows["beta"]["fired"] == 0
    h.clock.advance(2 * 3_600_000)
    assert h.call("GET", "/admin/v1/history/summary", "since=1h")[2]["tenants"] == []
    assert (
        len(h.call("GET", "/admin/v1/history/summary", "since=3h&tenant=beta")[2]["tenants"]) == 1
    )


# -------------------------------------------------------------------------------- the CLI


def _fire_on(node: Node, message_id: str) -> None:
    store, me = node.store, str(uuid.uuid4())
    store.maintain_history(WEEK)
    due = store.ping() + timedelta(milliseconds=10)
    store.enqueue([ScheduledMessage(message_id, due, b"k", b"v", [])], 0)
    rows = [r for r in store.claim(me, 1_000, 10, 4) if r.id == message_id]
    store.delete_fired(
        me, [(r.id, r.readied_at) for r in rows], None, [Ending(FIRED, "orders", 3, 18112, 3, None)]
    )


def test_admin_get_list_and_summary_of_ended_messages(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    _fire_on(node, "gone")
    status, out, _ = run(capsys, node, "get", "gone")
    assert status == 0 and out.startswith("fired ") and "to orders[3]@18112, 3 ms after" in out
    status, out, _ = run(capsys, node, "get", "gone", "--json")
    assert as_json(out)["offset"] == 18112
    status, out, _ = run(capsys, node, "list", "--state", "fired")
    rows = out.splitlines()
    assert status == 0 and rows[0].split()[:4] == ["ID", "STATE", "DEADLINE", "ENDED_AT"]
    assert rows[1].split()[:2] == ["gone", "fired"]
    status, out, _ = run(capsys, node, "list", "--state", "fired", "--all", "--json")
    assert [m["id"] for m in as_json(out)["messages"]] == ["gone"]
    status, out, _ = run(capsys, node, "list", "--state", "fired", "--key", "k")
    assert status == 0 and out.splitlines()[1].split()[:2] == ["gone", "fired"]
    status, out, _ = run(capsys, node, "list", "--state", "ended", "--key-prefix", "k", "--json")
    assert [(m["id"], m["key_text"]) for m in as_json(out)["messages"]] == [("gone", "k")]
    status, out, _ = run(capsys, node, "list", "--state", "fired", "--key", "other", "--json")
    assert status == 0 and as_json(out)["messages"] == []
    status, out, _ = run(capsys, node, "get", "gone")
    assert status == 0 and out.splitlines()[1] == "key: k"
    status, out, _ = run(capsys, node, "history", "summary", "--since", "1h")
    assert status == 0 and out.splitlines()[1].split()[:2] == ["TENANT", "FIRED"]
    assert out.splitlines()[2].split()[:2] == ["''", "1"]
    status, out, _ = run(capsys, node, "history", "summary", "--json")
    assert as_json(out)["tenants"][0]["fired"] == 1


# ------------------------------------------------------------------------ a tenant's deletion


def test_a_tenant_is_deleted_whole_after_a_dry_run_and_who_did_it_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = AdminHarness()
    h.store.maintain_history(WEEK)
    for i in range(3):
        _fire(h, f"gone-{i}", Ending(FIRED, "out", 0, i, 1, None), tenant="acme")
    _fire(h, "kept", Ending(FIRED, "out", 0, 9, 1, None), tenant="beta")
    later = h.clock.now() + timedelta(hours=1)
    h.store.enqueue(
        [ScheduledMessage(f"wait-{i}", later, None, None, [], tenant="acme") for i in range(2)]
        + [ScheduledMessage("beta-wait", later, None, None, [], tenant="beta")],
        0,
    )
    status, _, dry = h.call("POST", "/admin/v1/bulk/delete-tenant", "tenant=acme&dry_run=true")
    assert status == 200
    validate(dry, "TenantDeletion")
    assert (dry["messages"], dry["history"]) == (2, 3)
    assert h.store.get_message("wait-0") is not None  # a dry run changes nothing
    with caplog.at_level("INFO", logger="chronos.admin.history.tenant"):
        status, _, done = h.call("POST", "/admin/v1/bulk/delete-tenant", "tenant=acme")
    assert status == 200 and done["complete"]
    validate(done, "TenantDeletion")
    assert (done["cancelled"], done["history_deleted"]) == (2, 5)  # 3 fired + 2 just cancelled
    assert h.store.get_message("wait-0") is None and h.store.ended_messages("gone-0") == []
    assert h.store.get_message("beta-wait") is not None
    assert len(h.store.ended_messages("kept")) == 1
    assert "tenant 'acme' deleted through the admin API by the" in caplog.text
    status, _, body = h.call("POST", "/admin/v1/bulk/delete-tenant", "")
    assert status == 400 and "tenant" in body["error"]


def test_admin_delete_tenant_counts_first_then_deletes(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    _fire_on(node, "fired-one")
    status, out, _ = run(capsys, node, "delete-tenant", "", "--dry-run")
    assert status == 0 and out.strip() == (
        "tenant '': 5 messages and 1 history records would be deleted"
    )
    status, out, _ = run(capsys, node, "delete-tenant", "")
    assert status == 0
    assert out.strip() == "tenant '': 5 messages cancelled, 6 history records deleted"
    assert len(node.store) == 0 and node.store.ended_messages("fired-one") == []
