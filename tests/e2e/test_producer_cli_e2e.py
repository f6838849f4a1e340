"""The producer's and the dead-letter commands, run as real ``chronos`` subprocesses against the
real broker (and, for schedule/reschedule/cancel, a real node): what they write is read back by
an independent client (kafka-python)."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from chronos.protocol import (
    DEAD_LETTER_HEADERS,
    DEADLINE_HEADER,
    MESSAGE_ID_HEADER,
)
from tests.e2e.test_cli_e2e import chronos, header, node_env, read_all
from tests.support import Topics
from tests.support.dead_letters import write_dead_letters
from tests.support.polling import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

RELAY = "chronosScheduledFor"


def waiting(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT id FROM chronos_messages ORDER BY id").fetchall()
    return [str(r[0]) for r in rows]


def kafka_env(bootstrap: str, topics: Topics) -> dict[str, str]:
    return {
        "CHRONOS_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "CHRONOS_INPUT_TOPIC": topics.input,
        "CHRONOS_OUTPUT_TOPIC": topics.output,
        "CHRONOS_DEAD_LETTER_TOPIC": topics.dead_letter,
    }


def ok(result: Any) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return str(result.stdout)


def test_schedule_reschedule_cancel_and_tail_through_a_node(
    migrated_database_url: str, kafka_bootstrap: str, topics: Topics, run_node: Any
) -> None:
    env = {**node_env(migrated_database_url, kafka_bootstrap, topics)}
    env["CHRONOS_RELAY_DEADLINE_HEADER"] = RELAY
    node = run_node(env=env)
    assert node.wait_for_event("partitions_assigned", 30), node.output()
    cli_env = {**kafka_env(kafka_bootstrap, topics), "CHRONOS_RELAY_DEADLINE_HEADER": RELAY}

    out = ok(
        chronos(
            "schedule",
            *("--id", "a", "--in", "2s", "--tenant", "acme", "--key", "k", "--value", "va"),
            *("--header", "x=1", "--header", "x=2"),
            env=cli_env,
        )
    )
    assert "scheduled a on" in out
    ok(chronos("schedule", "--id", "b", "--in", "1h", "--value", "old", env=cli_env))
    ok(chronos("reschedule", "b", "--in", "1500ms", "--value", "vb", env=cli_env))
    ok(chronos("schedule", "--id", "c", "--in", "1h", "--key", "kc", env=cli_env))
    assert eventually(lambda: "c" in waiting(migrated_database_url)), node.output()
    ok(chronos("cancel", "c", "--key", "kc", env=cli_env))
    assert eventually(lambda: "c" not in waiting(migrated_database_url)), node.output()

    tailed = ok(chronos("tail", "--from-beginning", "--max", "2", env=cli_env, timeout=60))
    lines = tailed.strip().splitlines()
    assert len(lines) == 2, tailed
    for line in lines:
        assert " CreateTime lateness=" in line, line
    assert any("value=va" in line and "x=1, x=2" in line for line in lines), tailed
    assert any("value=vb" in line for line in lines), tailed

    fired = read_all(kafka_bootstrap, topics.output, topics.partitions, 2, settle=1.0)
    assert sorted(r.value for r in fired) == [b"va", b"vb"]
    a = next(r for r in fired if r.value == b"va")
    assert a.key == b"k"
    assert [(n, v) for n, v in a.headers if n == "x"] == [("x", b"1"), ("x", b"2")]
    assert header(a, RELAY) is not None

    # A target topic the node does not allow: dead-lettered with its code, listed by it.
    ok(chronos("schedule", "--id", "d", "--in", "1s", "--topic", "not-allowed-x", env=cli_env))

    def listed() -> list[dict[str, Any]]:
        args = ("admin", "dead-letters", "--reason", "topic_not_allowed", "--json")
        return list(json.loads(ok(chronos(*args, env=cli_env)))["dead_letters"])

    assert eventually(lambda: len(listed()) == 1, timeout=30), node.output()
    (dead,) = listed()
    assert dead["source"].startswith(topics.input + "/")
    assert "not-allowed-x" in dead["reason"] and dead["replayed"] is False


def test_dead_letters_listed_by_code_and_replayed_once(
    kafka_bootstrap: str, topics: Topics
) -> None:
    env = kafka_env(kafka_bootstrap, topics)
    letters = write_dead_letters(kafka_bootstrap, topics)

    listing = json.loads(ok(chronos("admin", "dead-letters", "--json", env=env)))
    assert [d["code"] for d in listing["dead_letters"]] == [
        "topic_not_allowed",
        "topic_not_allowed",
        "missing_deadline",
    ]
    first = listing["dead_letters"][0]
    assert first["source"] == "in/0/1" and first["replayed"] is False
    assert [h["name"] for h in first["headers"]] == [
        MESSAGE_ID_HEADER,
        DEADLINE_HEADER,
        "x",
        "x",
    ]
    table = ok(chronos("admin", "dead-letters", "--reason", "missing_deadline", env=env))
    assert "0:2" in table and "missing header chronosDeadline" in table
    assert "topic_not_allowed" not in table

    dry = json.loads(
        ok(
            chronos(
                "admin", "replay", "--reason", "topic_not_allowed", "--dry-run", "--json", env=env
            )
        )
    )
    assert (dry["replayed"], dry["dry_run"]) == (2, True)

    result = chronos("admin", "replay", "--reason", "topic_not_allowed", env=env)
    assert "replayed 2 records" in ok(result)
    assert "replayed 2, already replayed 0" in result.stderr  # progress
    again = json.loads(
        ok(chronos("admin", "replay", "--reason", "topic_not_allowed", "--json", env=env))
    )
    assert (again["replayed"], again["already_replayed"]) == (0, 2)

    chosen = json.loads(ok(chronos("admin", "replay", "--record", "0:2", "--json", env=env)))
    assert chosen["replayed"] == 1
    twice = json.loads(
        ok(chronos("admin", "replay", "--record", "0:2", "--record", "0:0", "--json", env=env))
    )
    assert (twice["replayed"], twice["already_replayed"]) == (0, 2)

    replayed = read_all(kafka_bootstrap, topics.input, topics.partitions, 3, settle=1.0)
    assert sorted(r.value for r in replayed) == [b"m", b"t0", b"t1"]
    for record in replayed:
        original = next(h for v, h in letters if v == record.value)
        assert (record.key, record.value) == (record.value, record.value)
        assert list(record.headers) == [(n, v) for n, v in original if n not in DEAD_LETTER_HEADERS]

    listing = json.loads(ok(chronos("admin", "dead-letters", "--json", env=env)))
    assert [d["replayed"] for d in listing["dead_letters"]] == [True, True, True]


def test_a_missing_dead_letter_topic_is_named(kafka_bootstrap: str, topics: Topics) -> None:
    env = {**kafka_env(kafka_bootstrap, topics), "CHRONOS_DEAD_LETTER_TOPIC": "no-such-topic-x"}
    result = chronos("admin", "dead-letters", env=env)
    assert result.returncode == 2, result.stderr
    assert "CHRONOS_DEAD_LETTER_TOPIC" in result.stderr and "Traceback" not in result.stderr
