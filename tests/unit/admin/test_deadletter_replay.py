"""Replaying dead letters without a broker (chronos.admin.deadletters.replay and .api): what a
replay publishes for each kind of dead letter — a scheduled message's is rebuilt as a valid input
record due now, to its own topic and tenant, byte-exact; one that cannot be is refused with why —
and the admin API's bounds: a dead-letter request never holds an HTTP worker past its budget
(the node's lock is waited for briefly, a batch's commit within the request), so /health is
never starved. tests/integration/test_dead_letter_replay.py replays on the real broker."""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError, KafkaException

from chronos.admin.deadletters import api as deadletters_api
from chronos.admin.deadletters.replay import input_headers
from chronos.admin.deadletters.topic import DeadLetter, read
from chronos.node.http import HTTP_REQUEST_DEADLINE, HTTP_WORKERS, start_http_server
from chronos.protocol import (
    DEAD_LETTER_ID_HEADER,
    DEAD_LETTER_REDUCED_HEADER,
    DEADLINE_HEADER,
    MAX_ID_LENGTH,
    MESSAGE_ID_HEADER,
    ScheduledMessage,
    dead_letter_headers,
    format_deadline,
    parse_record,
    scheduled_headers,
)
from chronos.store import Outcome
from chronos.testing import InMemoryStore
from tests.unit.admin.helpers import TOKEN, AdminHarness, make_settings
from tests.unit.admin.test_cli import FakeState
from tests.unit.helpers import DEAD_LETTER, Firing

NOW = datetime(2030, 6, 1, 12, 0, 0, 123000, tzinfo=UTC)
HEADERS = [("h", b"\x00\x01"), ("h", None), ("e", b"")]
REPLAY = "/admin/v1/dead-letters/replay"


def _dead_letter(f: Firing) -> DeadLetter:
    (dead,) = [r for r in f.publisher.records if r.topic == DEAD_LETTER]
    return read(0, 7, 0, dead.key, dead.value, dead.headers)


def _as_input(letter: DeadLetter) -> ScheduledMessage:
    headers = input_headers(letter, NOW)
    assert not isinstance(headers, str), headers
    parsed = parse_record(letter.key, letter.value, headers, topic_allowed=lambda _t: True)
    assert isinstance(parsed, ScheduledMessage), parsed
    return parsed


def test_a_publish_failed_dead_letter_replays_as_its_message_due_now_to_its_own_topic() -> None:
    f = Firing.create(max_publish_attempts=1)
    f.publisher.decide = lambda r: (
        KafkaError(KafkaError._UNKNOWN_TOPIC) if r.topic == "gone" else None
    )
    message = ScheduledMessage(
        "order-7", f.at(100), b"\xff\x00", b"v", HEADERS, target_topic="gone", tenant="acme"
    )
    assert f.store.enqueue([message], 0) == [Outcome.INSERTED]
    f.run_for(3000, step_ms=10)
    letter = _dead_letter(f)
    assert letter.code == "publish_failed" and letter.headers == HEADERS

    replayed = _as_input(letter)
    assert (replayed.id, replayed.target_topic, replayed.tenant) == ("order-7", "gone", "acme")
    assert replayed.deadline == NOW and replayed.recurrence is None  # fires now, once
    assert (replayed.key, replayed.value, replayed.headers) == (b"\xff\x00", b"v", HEADERS)


def test_an_expired_occurrence_of_a_series_replays_under_its_own_id() -> None:
    """The series keeps its id while it waits: a replay under it would be ignored."""
    f = Firing.create(max_lateness_ms=1_000)
    series = parse_record(
        b"k",
        b"v",
        [
            (MESSAGE_ID_HEADER, b"daily"),
            (DEADLINE_HEADER, format_deadline(f.at(100)).encode()),
            ("chronosEvery", b"PT1H"),
        ],
        now=f.clock.now(),
    )
    assert isinstance(series, ScheduledMessage)
    f.store.enqueue([series], 0)
    f.clock.advance(60_000)  # a minute late: past the second allowed
    f.run_for(200, step_ms=10)
    letter = _dead_letter(f)
    assert letter.code == "expired"
    replayed = _as_input(letter)
    assert replayed.id == f"daily@{format_deadline(series.deadline)}"
    assert replayed.target_topic is None and replayed.tenant == ""  # the output topic, default
    assert replayed.recurrence is None and replayed.deadline == NOW
    assert f.store.get("daily") is not None  # the series goes on under its id


def test_an_expired_record_at_intake_replays_without_its_old_chronos_headers() -> None:
    original = [
        (MESSAGE_ID_HEADER, b"late"),
        ("x", b"1"),
        (DEADLINE_HEADER, b"2020-01-01T00:00:00.000Z"),
        ("chronosExpires", b"PT1S"),
        ("x", b"2"),
    ]
    scheduled = scheduled_headers("late", datetime(2020, 1, 1, tzinfo=UTC), "routed", "t1")
    headers = dead_letter_headers(original, "expired: ...", "in/0/4", "expired", scheduled)
    replayed = _as_input(read(0, 1, 0, b"k", b"v", headers))
    assert (replayed.id, replayed.target_topic, replayed.tenant) == ("late", "routed", "t1")
    assert replayed.deadline == NOW and replayed.expires_ms is None
    assert replayed.headers == [("x", b"1"), ("x", b"2")]


def test_an_input_records_dead_letter_replays_as_it_came() -> None:
    original = [(MESSAGE_ID_HEADER, b"m"), (DEADLINE_HEADER, b"2030-01-01T00:00:00.000Z")]
    headers = dead_letter_headers(
        [*original, *HEADERS], "not allowed", "in/0/1", "topic_not_allowed"
    )
    assert input_headers(read(0, 0, 0, b"k", b"v", headers), NOW) == [*original, *HEADERS]
    # Written by an older Chronos with the record's own headers: as it came, too.
    old = dead_letter_headers(original, "expired: due ...", "in/0/2", "expired")
    assert input_headers(read(0, 1, 0, b"k", b"v", old), NOW) == original


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        # The firing path's dead letter before it kept its message's id, topic and tenant.
        (dead_letter_headers(HEADERS, "failed 3 times", "chronos/order-7", "publish_failed"), "id"),
        (dead_letter_headers([], "expired: due 9 ms ago", "chronos/old", "expired"), "id"),
        (
            [
                *dead_letter_headers(
                    [(MESSAGE_ID_HEADER, b"m")], "r", "in/0/1", "missing_deadline"
                ),
                (DEAD_LETTER_REDUCED_HEADER, b"value 9 bytes, key 1 bytes, 0 headers left out"),
            ],
            "reduced",
        ),
    ],
)
def test_a_dead_letter_that_cannot_make_a_valid_input_record_is_refused(
    headers: list[tuple[str, bytes | None]], why: str
) -> None:
    refused = input_headers(read(0, 3, 0, b"k", None, headers), NOW)
    assert isinstance(refused, str) and why in refused, refused


# -- the admin API's bounds -------------------------------------------------------------------


class SlowDeadLetters:
    """The dead-letter topic without a broker: three dead letters of ``topic_not_allowed``;
    opening it waits for ``gate`` (a slow broker) when one is set."""

    gate: threading.Event | None = None

    def __init__(self, settings: Any, timeout: float = 10.0, _overrides: Any = None) -> None:
        if SlowDeadLetters.gate is not None:
            SlowDeadLetters.gate.wait(30)
        self.settings, self.topic, self.partitions, self.timeout = (
            settings,
            DEAD_LETTER,
            [0],
            timeout,
        )
        original = [(MESSAGE_ID_HEADER, b"m"), (DEADLINE_HEADER, b"2030-01-01T00:00:00.000Z")]
        headers = dead_letter_headers(original, "not allowed", "in/0/1", "topic_not_allowed")
        self.letters = [read(0, n, 0, b"k", b"v", headers) for n in range(3)]

    def scan(self, starts: dict[int, int] | None = None) -> Iterator[DeadLetter]:
        start = (starts or {}).get(0, 0)
        yield from (letter for letter in self.letters if letter.offset >= start)

    def one(self, partition: int, offset: int) -> DeadLetter:
        return self.letters[offset]

    def replayed(self) -> set[tuple[int, int]]:
        return set()

    def ends(self) -> dict[int, tuple[int, int]]:
        return {0: (0, len(self.letters))}

    def close(self) -> None:
        pass

    def __enter__(self) -> SlowDeadLetters:
        return self

    def __exit__(self, *_exc: object) -> None:
        pass


class UnconfirmingProducer:
    """A producer whose broker never confirms anything: each wait asked for is recorded (and
    returns at once, as if it had run out)."""

    waits: ClassVar[list[float]] = []

    def __init__(self, _config: dict[str, Any]) -> None:
        pass

    def _wait(self, timeout: float) -> None:
        UnconfirmingProducer.waits.append(timeout)

    def produce(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def poll(self, _timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = -1) -> int:
        self._wait(timeout)
        return 1  # one record still unconfirmed

    def init_transactions(self, timeout: float = -1) -> None:
        self._wait(timeout)

    def begin_transaction(self) -> None:
        pass

    def commit_transaction(self, timeout: float = -1) -> None:
        self._wait(timeout)
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit timed out"))

    def abort_transaction(self, timeout: float = -1) -> None:
        self._wait(timeout)


@pytest.fixture
def slow_topic(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """The API's dead-letter topic is ``SlowDeadLetters``; opening it waits for the event."""
    gate = threading.Event()
    monkeypatch.setattr(deadletters_api, "DeadLetterTopic", SlowDeadLetters)
    monkeypatch.setattr(SlowDeadLetters, "gate", gate)
    yield gate
    gate.set()


def test_a_second_dead_letter_request_on_a_node_is_answered_at_once_not_queued(
    slow_topic: threading.Event,
) -> None:
    harness = AdminHarness(dead_letter_topic=DEAD_LETTER)
    first = threading.Thread(
        target=harness.call,
        args=("POST", REPLAY),
        kwargs={"body": {"reason": "x", "dry_run": True}},
        daemon=True,
    )
    first.start()  # holds the node's dead-letter lock, its broker slow
    time.sleep(0.2)
    answers: list[tuple[int, Any]] = []

    def second() -> None:
        status, _, body = harness.call("GET", "/admin/v1/dead-letters")
        answers.append((status, body))

    waiting = threading.Thread(target=second, daemon=True)
    started = time.monotonic()
    waiting.start()
    waiting.join(5)
    assert not waiting.is_alive(), "the second request waited for the first one"
    assert time.monotonic() - started < 3
    ((status, body),) = answers
    assert status == 409 and "another dead-letter request" in body["error"], body
    slow_topic.set()
    first.join(10)


def test_dead_letter_requests_never_starve_health(slow_topic: threading.Event) -> None:
    config = make_settings(http_host="127.0.0.1", http_port=0, dead_letter_topic=DEAD_LETTER)
    server = start_http_server(config, FakeState(config.node_id), InMemoryStore())
    url = f"http://127.0.0.1:{server.server_address[1]}"

    def replay() -> None:
        request = urllib.request.Request(
            url + REPLAY,
            data=b'{"reason": "x", "dry_run": true}',
            method="POST",
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        with contextlib.suppress(urllib.error.HTTPError, OSError):  # a 409 among them
            urllib.request.urlopen(request, timeout=40).read()

    try:
        clients = [threading.Thread(target=replay, daemon=True) for _ in range(HTTP_WORKERS + 1)]
        for client in clients:
            client.start()
        time.sleep(0.5)  # every worker has one; the first holds the lock, its broker slow
        started = time.monotonic()
        with urllib.request.urlopen(url + "/health/live", timeout=6) as answer:
            assert answer.status == 200
        assert time.monotonic() - started < 4
    finally:
        slow_topic.set()
        server.shutdown()
        server.server_close()


def test_a_replays_waits_for_the_broker_end_within_the_request(
    slow_topic: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_topic.set()  # the topic opens at once; its broker confirms nothing
    monkeypatch.setattr("confluent_kafka.Producer", UnconfirmingProducer)
    monkeypatch.setattr(UnconfirmingProducer, "waits", [])
    harness = AdminHarness(dead_letter_topic=DEAD_LETTER)
    status, _, body = harness.call("POST", REPLAY, body={"reason": "topic_not_allowed"})
    assert status == 503 and "not confirmed" in body["error"], body
    assert UnconfirmingProducer.waits, "nothing waited for the broker"
    # Within the HTTP server's own deadline: a worker is never held past it.
    assert max(UnconfirmingProducer.waits) < HTTP_REQUEST_DEADLINE - 2, UnconfirmingProducer.waits


def test_the_replay_markers_not_read_yet_still_answer_a_token_to_go_on(
    slow_topic: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow_topic.set()
    monkeypatch.setattr(deadletters_api, "MARKERS_BUDGET_S", 0.0)  # one record a request
    harness = AdminHarness(dead_letter_topic=DEAD_LETTER)
    body: dict[str, Any] = {"reason": "topic_not_allowed", "dry_run": True}
    for _ in range(5):
        status, _, answer = harness.call("POST", REPLAY, body=body)
        assert status == 200, answer
        if answer["complete"]:
            break
        assert answer["resume"], answer  # never "": the API refuses that
        body["resume"] = answer["resume"]
    assert answer["complete"] and answer["replayed"] == 3, answer


def test_occurrence_ids_fit_the_id_limit() -> None:
    due = datetime(2030, 1, 1, tzinfo=UTC) + timedelta(hours=1)
    for message_id in ("s", "s" * MAX_ID_LENGTH):
        headers = dict(scheduled_headers(message_id, due, None, "", occurrence=True))
        replay_id = (headers[DEAD_LETTER_ID_HEADER] or b"").decode()
        assert replay_id.endswith("@2030-01-01T01:00:00.000Z")
        assert len(replay_id) <= MAX_ID_LENGTH
