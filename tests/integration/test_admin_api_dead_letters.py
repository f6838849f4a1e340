"""The dead-letter endpoints of the admin API on the real broker and Postgres: browse by reason
with a cursor, replay chosen records or a reason's (dry run first), once each and sharing the
replay markers with ``chronos admin replay``; the read-only token reads and cannot replay; the
replay is logged with the token's name and the client's address and recorded in the audit
trail."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from chronos.admin.deadletters import api as deadletters_api
from chronos.admin.deadletters.replay import Replayer
from chronos.admin.deadletters.topic import DeadLetterTopic
from chronos.config.settings import Secret
from chronos.embedded import create_topics
from chronos.protocol import (
    DEAD_LETTER_HEADERS,
    DEAD_LETTER_REDUCED_HEADER,
    MESSAGE_ID_HEADER,
    dead_letter_headers,
)
from tests.integration.admin_api import TOKEN, Api
from tests.support import Topics
from tests.support.dead_letters import read_topic, write, write_dead_letters

pytestmark = pytest.mark.integration

READER = "read-only-s3cret"
REPLAY = "/admin/v1/dead-letters/replay"


@pytest.fixture
def audit_topic(kafka_bootstrap: str, topics: Topics) -> Iterator[str]:
    name = f"{topics.input}-audit"
    create_topics(kafka_bootstrap, {name: 1})
    yield name
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_topics([name], operation_timeout=5).values():
        with contextlib.suppress(Exception):  # best effort: a leftover topic is harmless
            future.result(timeout=5)


@pytest.fixture
def dlq_api(
    migrated_database_url: str,
    start_api: Callable[..., Api],
    kafka_bootstrap: str,
    topics: Topics,
    audit_topic: str,
) -> Api:
    return start_api(
        migrated_database_url,
        kafka_bootstrap_servers=kafka_bootstrap,
        input_topic=topics.input,
        output_topic=topics.output,
        dead_letter_topic=topics.dead_letter,
        audit_topic=audit_topic,
        admin_read_token=Secret(READER),
    )


def _post(api: Api, body: dict[str, Any], token: str | None = TOKEN) -> tuple[int, Any]:
    status, _, answer = api.request("POST", REPLAY, body=body, token=token)
    return status, answer


def test_browse_by_reason_and_page_with_a_cursor(
    dlq_api: Api, kafka_bootstrap: str, topics: Topics
) -> None:
    write_dead_letters(kafka_bootstrap, topics)
    status, page = dlq_api.get("/admin/v1/dead-letters")
    assert status == 200, page
    assert [d["code"] for d in page["dead_letters"]] == [
        "topic_not_allowed",
        "topic_not_allowed",
        "missing_deadline",
    ]
    first = page["dead_letters"][0]
    assert (first["source_topic"], first["source_partition"], first["source_offset"]) == (
        "in",
        0,
        1,
    )
    assert "'gone' is not allowed" in first["reason"] and first["when"].endswith("Z")
    assert [h["name"] for h in first["headers"]] == [
        "chronosMessageId",
        "chronosDeadline",
        "x",
        "x",
    ]
    assert (first["replayed"], page["replayed_known"], page["next_cursor"]) == (False, True, None)

    status, only = dlq_api.get("/admin/v1/dead-letters?reason=missing_deadline")
    assert [(d["partition"], d["offset"]) for d in only["dead_letters"]] == [(0, 2)]

    status, one = dlq_api.get("/admin/v1/dead-letters?limit=2")
    assert [d["offset"] for d in one["dead_letters"]] == [0, 1] and one["next_cursor"]
    status, rest = dlq_api.get(f"/admin/v1/dead-letters?limit=2&cursor={one['next_cursor']}")
    assert [d["offset"] for d in rest["dead_letters"]] == [2]
    status, bad = dlq_api.get("/admin/v1/dead-letters?cursor=nonsense!")
    assert status == 400, bad


def test_replay_dry_run_then_once_each_by_reason_and_chosen(
    dlq_api: Api,
    kafka_bootstrap: str,
    topics: Topics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    letters = write_dead_letters(kafka_bootstrap, topics)
    status, refused = _post(dlq_api, {"reason": "topic_not_allowed"}, token=READER)
    assert status == 403, refused
    status, dry = _post(dlq_api, {"reason": "topic_not_allowed", "dry_run": True})
    assert status == 200, dry
    assert (dry["replayed"], dry["dry_run"], dry["complete"]) == (2, True, True)
    assert read_topic(kafka_bootstrap, topics.input, topics.partitions, settle=0.5) == []

    with caplog.at_level(logging.INFO, logger="chronos.admin.deadletters.api"):
        status, done = _post(dlq_api, {"reason": "topic_not_allowed"})
    assert status == 200, done
    assert (done["replayed"], done["already_replayed"], done["complete"]) == (2, 0, True)
    (logged,) = [r for r in caplog.records if getattr(r, "event", "") == "dead_letters_replayed"]
    assert "the admin token from 127.0.0.1" in logged.getMessage()
    status, again = _post(dlq_api, {"reason": "topic_not_allowed"})
    assert (again["replayed"], again["already_replayed"]) == (0, 2)

    status, chosen = _post(dlq_api, {"records": ["0:2"]})
    assert (status, chosen["replayed"]) == (200, 1)
    status, twice = _post(dlq_api, {"records": ["0:2", "0:0"]})
    assert (twice["replayed"], twice["already_replayed"]) == (0, 2)

    # The command line's replay reads the same markers: nothing is left for it.
    with DeadLetterTopic(dlq_api.settings) as dlq:
        assert Replayer(dlq, lambda _p: None).by_code("topic_not_allowed").replayed == 0

    replayed = read_topic(kafka_bootstrap, topics.input, topics.partitions)
    assert sorted(r.value for r in replayed) == [b"m", b"t0", b"t1"]
    for record in replayed:
        original = next(h for v, h in letters if v == record.value)
        assert record.key == record.value
        assert list(record.headers) == [(n, v) for n, v in original if n not in DEAD_LETTER_HEADERS]

    status, page = dlq_api.get("/admin/v1/dead-letters", token=READER)
    assert status == 200
    assert [d["replayed"] for d in page["dead_letters"]] == [True, True, True]

    audit = read_topic(kafka_bootstrap, topics.input + "-audit", 1)
    bulk = [json.loads(r.value) for r in audit]
    replays = [e for e in bulk if e["event"] == "bulk" and e["details"]["action"] == "replay"]
    assert [(e["count"], e["target"].get("reason")) for e in replays][:2] == [
        (2, "topic_not_allowed"),
        (0, "topic_not_allowed"),
    ]
    assert replays[0]["by"] == "the admin token from 127.0.0.1"


def test_a_request_out_of_time_answers_where_to_resume(
    dlq_api: Api, kafka_bootstrap: str, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No time at all: each request reads one record, then answers a cursor or a resume token;
    # following them reaches every record, and replays each once.
    write_dead_letters(kafka_bootstrap, topics)
    monkeypatch.setattr(deadletters_api, "BUDGET_S", 0.0)
    seen: list[int] = []
    cursor = ""
    for _ in range(10):
        status, page = dlq_api.get("/admin/v1/dead-letters" + (f"?cursor={cursor}" * bool(cursor)))
        assert status == 200, page
        seen += [d["offset"] for d in page["dead_letters"]]
        if not (cursor := page["next_cursor"]):
            break
    assert seen == [0, 1, 2]
    replayed, answers = 0, 0
    body: dict[str, Any] = {"reason": "topic_not_allowed"}
    while True:
        status, answer = _post(dlq_api, body)
        assert status == 200, answer
        replayed, answers = replayed + answer["replayed"], answers + 1
        if answer["complete"]:
            break
        body["resume"] = answer["resume"]
        assert answers < 10
    assert (replayed, answers > 1) == (2, True)
    assert len(read_topic(kafka_bootstrap, topics.input, topics.partitions)) == 2


def test_bad_replay_bodies_and_no_dead_letter_topic(
    dlq_api: Api, migrated_database_url: str, start_api: Callable[..., Api]
) -> None:
    for body in ({}, {"reason": "a", "records": ["0:1"]}, {"records": ["x"]}, {"reason": ""}):
        status, answer = _post(dlq_api, body)
        assert status == 400, (body, answer)
    for token in (None, "wrong"):
        assert dlq_api.get("/admin/v1/dead-letters", token=token)[0] == 401
        assert _post(dlq_api, {"reason": "a"}, token=token)[0] == 401
    status, missing = _post(dlq_api, {"records": ["0:99"]})
    assert status == 404 and "no record 0:99" in missing["error"]
    off = start_api(migrated_database_url, dead_letter_topic="")
    status, answer = off.get("/admin/v1/dead-letters")
    assert status == 404 and "CHRONOS_DEAD_LETTER_TOPIC" in answer["error"]


def test_a_replay_while_the_markers_are_still_read_answers_a_token_to_go_on(
    dlq_api: Api, kafka_bootstrap: str, topics: Topics, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No time for the markers: each request reads one more, answering a token until all are.
    write_dead_letters(kafka_bootstrap, topics)
    monkeypatch.setattr(deadletters_api, "MARKERS_BUDGET_S", 0.0)
    body: dict[str, Any] = {"reason": "topic_not_allowed"}
    replayed = 0
    for _ in range(10):
        status, answer = _post(dlq_api, body)
        assert status == 200, answer
        replayed += answer["replayed"]
        if answer["complete"]:
            break
        assert answer["resume"], answer  # a token the API takes back, never ""
        body["resume"] = answer["resume"]
    assert (answer["complete"], replayed) == (True, 2)
    assert len(read_topic(kafka_bootstrap, topics.input, topics.partitions)) == 2


def test_a_dead_letter_that_cannot_be_rebuilt_is_refused_with_why_and_not_marked(
    dlq_api: Api, kafka_bootstrap: str, topics: Topics
) -> None:
    # The firing path's dead letter as an older Chronos wrote it (its message's id, topic and
    # tenant not kept), and a reduced one (its value left out).
    old = dead_letter_headers([("h", b"1")], "failed 3 times", "chronos/order-7", "publish_failed")
    reduced = [
        *dead_letter_headers([(MESSAGE_ID_HEADER, b"m")], "refused", "in/0/3", "publish_failed"),
        (DEAD_LETTER_REDUCED_HEADER, b"value 9 bytes, key 1 bytes, 0 headers left out"),
    ]
    write(kafka_bootstrap, topics.dead_letter, [(b"old", old), (b"reduced", reduced)])
    status, answer = _post(dlq_api, {"reason": "publish_failed"})
    assert status == 200, answer
    assert (answer["replayed"], answer["refused"], answer["complete"]) == (0, 2, True)
    reasons = {r["record"]: r["reason"] for r in answer["refusals"]}
    assert sorted(reasons) == ["0:0", "0:1"]
    assert "its id, target topic and tenant are not in it" in reasons["0:0"]
    assert "reduced" in reasons["0:1"]
    status, chosen = _post(dlq_api, {"records": ["0:0"]})
    assert (status, chosen["replayed"], chosen["refused"]) == (200, 0, 1)
    assert read_topic(kafka_bootstrap, topics.input, topics.partitions, settle=0.5) == []
    status, page = dlq_api.get("/admin/v1/dead-letters")
    assert [d["replayed"] for d in page["dead_letters"]] == [False, False]  # not marked
