"""``chronos admin`` against the node's real HTTP server (chronos.node.http) on the in-memory store:
every action, tables and --json, pagination, settings from flags and the environment, errors."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chronos import cli
from chronos.admin import cli as admin_cli
from chronos.config.settings import Secret, load
from chronos.node.http import ChronosHTTPServer, start_http_server
from chronos.protocol import ScheduledMessage
from chronos.testing import InMemoryStore

TOKEN = "cli-token"


@dataclass
class FakeState:
    node_id: str
    stopping: bool = False
    waiting_for: str = ""  # what start-up waits for ("" once the loops run)

    def loops_alive(self) -> bool:
        return True

    def stalled_loops(self) -> list[str]:
        return []


@dataclass
class Node:
    url: str
    store: InMemoryStore
    node_id: str
    server: ChronosHTTPServer


@pytest.fixture
def node() -> Iterator[Node]:
    node_id = str(uuid.uuid4())
    settings = load(
        environ={},
        database_url=Secret("postgresql://unused/db"),
        admin_token=Secret(TOKEN),
        node_id=node_id,
        http_host="127.0.0.1",
        http_port=0,
        max_publish_attempts=1,
    )
    store = InMemoryStore()
    store.register_node(node_id, 10, hostname="host-a", version="test")
    base = datetime.now(UTC) + timedelta(hours=1)
    store.enqueue(
        [
            ScheduledMessage(f"m{i}", base + timedelta(seconds=i), b"k", b"v", [("h", b"1")])
            for i in range(5)
        ],
        0,
    )
    server = start_http_server(settings, FakeState(node_id), store)
    try:
        yield Node(f"http://127.0.0.1:{server.server_address[1]}", store, node_id, server)
    finally:
        server.shutdown()
        server.server_close()


def run(
    capsys: pytest.CaptureFixture[str], node: Node | None, *argv: str, env: bool = False
) -> tuple[int, str, str]:
    """Run ``chronos admin ARGV`` (URL and token as flags, or in the environment)."""
    args = list(argv)
    if node is not None and not env:
        args += ["--url", node.url, "--token", TOKEN]
    if env and node is not None:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(admin_cli.URL_ENV, node.url)
            mp.setenv(admin_cli.TOKEN_ENV, TOKEN)
            status = cli.main(["admin", *args])
    else:
        status = cli.main(["admin", *args])
    out, err = capsys.readouterr()
    return status, out, err


def as_json(out: str) -> Any:
    return json.loads(out)


def test_stats_as_a_table_and_as_json(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, node, "stats")
    assert status == 0
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert lines["waiting"] == "5" and lines["parked"] == "0"
    status, out, _ = run(capsys, node, "stats", "--json")
    assert status == 0 and as_json(out)["waiting"] == 5


def test_url_and_token_from_the_environment(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, node, "stats", "--json", env=True)
    assert status == 0 and as_json(out)["claimed"] == 0


def test_get_one_message(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, node, "get", "m3")
    assert status == 0
    assert "state" in out and "waiting" in out and "headers" in out
    status, out, _ = run(capsys, node, "get", "m3", "--json", "--include-value")
    message = as_json(out)
    assert (message["id"], message["value"], message["headers"][0]["name"]) == ("m3", "dg==", "h")


def test_list_pages_with_the_cursor_and_all(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, node, "list", "--limit", "2", "--json")
    page = as_json(out)
    assert status == 0 and [m["id"] for m in page["messages"]] == ["m0", "m1"]
    status, out, _ = run(capsys, node, "list", "--limit", "2", "--cursor", page["next_cursor"])
    assert status == 0
    rows = out.splitlines()
    assert rows[0].split()[:3] == ["ID", "STATE", "DEADLINE"]
    assert [r.split()[0] for r in rows[1:3]] == ["m2", "m3"] and rows[3].startswith("more: ")
    status, out, _ = run(capsys, node, "list", "--limit", "2", "--all", "--json")
    everything = as_json(out)
    assert [m["id"] for m in everything["messages"]] == [f"m{i}" for i in range(5)]
    assert everything["next_cursor"] is None
    status, out, _ = run(capsys, node, "list", "--state", "parked", "--json")
    assert as_json(out)["messages"] == []
    third = as_json(run(capsys, node, "get", "m3", "--json")[1])["deadline"]
    status, out, _ = run(capsys, node, "list", "--from", third, "--json")
    assert [m["id"] for m in as_json(out)["messages"]] == ["m3", "m4"]


def test_nodes_shows_the_leader(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, node, "nodes")
    assert status == 0
    assert out.splitlines()[0].split()[:3] == ["NODE_ID", "LIVE", "LEADER"]
    assert node.node_id in out and f"leader: {node.node_id}" in out
    assert "fired/s (cluster): 0.0" in out.splitlines()
    status, out, _ = run(capsys, node, "nodes", "--json", "--include-dead")
    assert as_json(out)["leader"] == node.node_id


def test_cancel_then_get_is_not_found(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, node, "cancel", "m1")[:2] == (0, "cancelled m1\n")
    assert "m1" not in node.store
    status, out, err = run(capsys, node, "get", "m1")
    assert status == 1 and out == "" and "404" in err and "not scheduled" in err
    assert "Traceback" not in err


def test_cancel_of_a_claimed_message_succeeds_and_says_its_firing_goes_on(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    (row,) = node.store.claim(str(uuid.uuid4()), 2 * 3_600_000, 1, 4)  # m0, an hour early
    status, out, err = run(capsys, node, "cancel", row.id)
    assert (status, err) == (0, "")
    assert out.startswith(f"cancelled {row.id} (claimed: ") and "not stopped" in out
    assert as_json(run(capsys, node, "cancel", row.id, "--json")[1]) == {
        "id": row.id,
        "cancelled": True,
        "claimed": True,
    }
    assert as_json(run(capsys, node, "cancel", "m1", "--json")[1])["claimed"] is False


def test_requeue_a_parked_message_and_refusal_of_a_waiting_one(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    me = str(uuid.uuid4())
    soon = datetime.now(UTC) + timedelta(seconds=30)
    node.store.enqueue([ScheduledMessage("due", soon, None, b"v", [])], 0)
    for _ in range(2):  # park_attempts = 2 * max_publish_attempts = 2
        rows = node.store.claim(me, 60_000, 10, 2)
        claims = [(r.id, r.readied_at) for r in rows if r.id == "due"]
        node.store.release(me, claims, failed=True, errors=["refused"], park_attempts=2)
    status, out, _ = run(capsys, node, "list", "--state", "parked", "--json")
    assert [m["id"] for m in as_json(out)["messages"]] == ["due"]
    status, out, err = run(capsys, node, "requeue", "m0")
    assert status == 1 and "409" in err and "not parked" in err
    assert run(capsys, node, "requeue", "due", "--json")[:2] == (
        0,
        json.dumps({"id": "due", "requeued": True}, indent=2) + "\n",
    )


def test_ids_are_quoted_in_the_path(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    odd = "a/b?c&d #é"
    node.store.enqueue(
        [ScheduledMessage(odd, datetime.now(UTC) + timedelta(hours=2), None, b"v", [])], 0
    )
    status, out, _ = run(capsys, node, "get", odd, "--json")
    assert status == 0 and as_json(out)["id"] == odd
    assert run(capsys, node, "cancel", odd)[0] == 0 and odd not in node.store


def test_reschedule_sends_the_documented_body(
    node: Node, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request side of the contract (POST .../reschedule with {"deadline"} or {"delay_ms"});
    the endpoint itself is exercised by the test below."""
    sent: list[tuple[str, str, Any]] = []

    def fake(
        self: admin_cli.AdminClient, method: str, path: str, params: Any = None, body: Any = None
    ) -> Any:
        sent.append((method, path, body))
        return None

    monkeypatch.setattr(admin_cli.AdminClient, "request", fake)
    assert run(capsys, node, "reschedule", "a/b", "--in", "1.5")[0] == 0
    assert run(capsys, node, "reschedule", "m1", "--at", "2030-01-02T03:04:05")[0] == 0
    assert run(capsys, node, "reschedule", "m1", "--at", "2030-01-02T05:04:05+02:00")[0] == 0
    assert sent == [
        ("POST", "/messages/a%2Fb/reschedule", {"delay_ms": 1500}),
        ("POST", "/messages/m1/reschedule", {"deadline": "2030-01-02T03:04:05.000+00:00"}),
        ("POST", "/messages/m1/reschedule", {"deadline": "2030-01-02T05:04:05.000+02:00"}),
    ]


def test_reschedule_against_the_endpoint(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, node, "reschedule", "m4", "--in", "7200")
    assert status == 0, err
    status, out, _ = run(capsys, node, "get", "m4", "--json")
    deadline = datetime.fromisoformat(as_json(out)["deadline"])
    assert abs((deadline - datetime.now(UTC)).total_seconds() - 7200) < 60


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["stats"], "CHRONOS_ADMIN_TOKEN (--token)"),
        (["stats", "--token", "t", "--url", "localhost:8080"], "CHRONOS_ADMIN_URL (--url)"),
    ],
)
def test_missing_or_bad_settings_exit_2_naming_them(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(admin_cli.TOKEN_ENV, raising=False)
    monkeypatch.delenv(admin_cli.URL_ENV, raising=False)
    status, _, err = run(capsys, None, *argv)
    assert status == 2 and named in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["list", "--limit", "0"], "--limit"),
        (["list", "--state", "gone"], "--state"),
        (["list", "--from", "yesterday"], "--from"),
        (["reschedule", "x"], "--at"),
        (["reschedule", "x", "--in", "-3"], "--in"),
        (["reschedule", "x", "--in", "3", "--at", "2030-01-01T00:00:00Z"], "--at"),
        (["frobnicate"], "frobnicate"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["admin", *argv])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and named in err and "Traceback" not in err


def test_an_unreachable_node_is_exit_1_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from chronos.embedded import free_port

    url = f"http://127.0.0.1:{free_port()}"
    status = cli.main(["admin", "stats", "--url", url, "--token", TOKEN, "--timeout", "2"])
    err = capsys.readouterr().err
    assert status == 1 and "cannot reach the admin API" in err and "Traceback" not in err


def test_a_wrong_token_is_exit_1_with_the_api_error(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    status = cli.main(["admin", "stats", "--url", node.url, "--token", "wrong"])
    err = capsys.readouterr().err
    assert status == 1 and "401" in err


def test_the_cli_shows_tenants_as_a_table_and_as_json(
    node: Node,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for i in range(5):
        node.store.set_tenant(f"m{i}", "acme" if i < 3 else "")
    status, out, _ = run(capsys, node, "tenants")
    assert status == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "TENANT",
        "OVERDUE",
        "OLDEST_OVERDUE_AGE_SECONDS",
        "WAITING",
        "CLAIMED",
        "PARKED",
    ]
    assert lines[1].split() == ["'acme'", "0", "0.0", "3", "0", "0"]
    assert lines[2].split() == ["''", "0", "0.0", "2", "0", "0"]
    status, out, _ = run(capsys, node, "tenants", "--limit", "1", "--json")
    payload = as_json(out)
    assert [t["tenant"] for t in payload["tenants"]] == ["acme"] and payload["limit"] == 1


def test_hostile_ids_cannot_forge_rows_or_reach_the_terminal_raw(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    """An id or header name with a newline or a terminal escape (producer-chosen text) is
    printed escaped in tables, in a message's details and in errors."""
    hostile = "evil\nm0  waiting  forged\x1b[2J\u2028"
    node.store.enqueue(
        [
            ScheduledMessage(
                hostile,
                datetime.now(UTC) + timedelta(hours=1),
                b"k",
                b"v",
                [("h\x1b]0;x\x07", b"1")],
            )
        ],
        0,
    )
    status, out, _ = run(capsys, node, "list", "--limit", "10")
    assert status == 0
    assert "\x1b" not in out and "\u2028" not in out
    assert len(out.splitlines()) == 1 + 6  # the header and six rows: no forged row
    assert "evil\\nm0" in out
    status, out, _ = run(capsys, node, "get", hostile)
    assert status == 0 and "\x1b" not in out and "\\x1b" in out
    status, _, err = run(capsys, node, "cancel", "gone\x1b[31m")
    assert status == 1 and "\x1b" not in err


# ------------------------------------------------------------------- filters and bulk actions


def _with_tenants(node: Node) -> None:
    base = datetime.now(UTC) + timedelta(hours=2)
    node.store.enqueue(
        [
            ScheduledMessage(
                f"acme-{i}", base + timedelta(seconds=i), b"user:1", b"v", [], tenant="acme"
            )
            for i in range(3)
        ],
        0,
    )


def test_a_count_past_its_limit_is_shown_as_an_estimate(
    node: Node, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _with_tenants(node)
    monkeypatch.setattr("chronos.admin.messages.api.COUNT_LIMIT", 2)  # 3 match: past it
    status, out, _ = run(capsys, node, "list", "--tenant", "acme", "--count", "--json")
    assert (as_json(out)["count"], as_json(out)["count_exact"]) == (3, False)
    status, out, _ = run(capsys, node, "list", "--tenant", "acme", "--count")
    assert status == 0 and "matching: about 3" in out


def test_list_takes_the_filter_flags(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    _with_tenants(node)
    status, out, _ = run(capsys, node, "list", "--tenant", "acme", "--count", "--json")
    page = as_json(out)
    assert status == 0 and [m["id"] for m in page["messages"]] == ["acme-0", "acme-1", "acme-2"]
    assert (page["count"], page["count_exact"]) == (3, True)
    second = page["messages"][1]["deadline"]
    for flags, expected in (
        (["--id-prefix", "acme-1"], ["acme-1"]),
        (
            [
                "--key",
                "user:1",
                "--to",
                second,
            ],
            ["acme-0"],
        ),
        (["--key-prefix", "user:"], ["acme-0", "acme-1", "acme-2"]),
        (["--recurring"], []),
        (
            ["--no-recurring", "--tenant", "acme", "--state", "waiting"],
            ["acme-0", "acme-1", "acme-2"],
        ),
        (["--topic", "nowhere"], []),
    ):
        status, out, _ = run(capsys, node, "list", *flags, "--json")
        assert status == 0 and [m["id"] for m in as_json(out)["messages"]] == expected, flags
    status, out, _ = run(capsys, node, "list", "--tenant", "acme", "--count")
    assert out.splitlines()[0].split()[:5] == ["ID", "STATE", "DEADLINE", "TENANT", "KEY_TEXT"]
    assert "user:1" in out and out.rstrip().endswith("matching: 3")


def test_cancel_by_filter_with_a_dry_run_first(
    node: Node, capsys: pytest.CaptureFixture[str]
) -> None:
    _with_tenants(node)
    status, out, _ = run(capsys, node, "cancel", "--tenant", "acme", "--dry-run")
    assert (status, out.strip()) == (0, "3 messages match")
    assert len(node.store.list_messages(state=None, park_attempts=2, limit=100)) == 8
    status, out, _ = run(capsys, node, "cancel", "--tenant", "acme")
    assert (status, out.strip()) == (0, "cancelled 3")
    assert len(node.store.list_messages(state=None, park_attempts=2, limit=100)) == 5
    status, out, _ = run(capsys, node, "cancel", "--tenant", "acme", "--json")
    assert status == 0 and as_json(out)["cancelled"] == 0


def test_reschedule_by_filter(node: Node, capsys: pytest.CaptureFixture[str]) -> None:
    _with_tenants(node)
    before = as_json(run(capsys, node, "get", "acme-0", "--json")[1])["deadline"]
    status, out, _ = run(capsys, node, "reschedule", "--tenant", "acme", "--shift", "-60")
    assert (status, out.strip()) == (0, "rescheduled 3")
    after = as_json(run(capsys, node, "get", "acme-0", "--json")[1])["deadline"]
    shift = datetime.fromisoformat(before) - datetime.fromisoformat(after)
    assert shift == timedelta(minutes=1)
    status, out, _ = run(capsys, node, "reschedule", "--id-prefix", "acme-", "--now", "--dry-run")
    assert (status, out.strip()) == (0, "3 messages match")
    status, out, _ = run(capsys, node, "reschedule", "--id-prefix", "acme-", "--now")
    assert (status, out.strip()) == (0, "rescheduled 3")


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["cancel"], "filter flags"),
        (["cancel", "m1", "--tenant", "acme"], "not both"),
        (["cancel", "--state", "parked"], "filter flags"),
        (["reschedule", "--tenant", "acme", "--in", "5"], "--in"),
        (["reschedule", "m1", "--now"], "--now"),
    ],
)
def test_an_id_or_a_filter_is_needed_exit_2(
    node: Node, argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(capsys, node, *argv)
    assert status == 2 and named in err and "Traceback" not in err
