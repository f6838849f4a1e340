"""The admin API's dead-letter endpoints: browse the dead-letter topic and replay records to the
input topic, once each (the reading and replaying are chronos.admin.deadletters.topic's and
.replay's, shared with ``chronos admin dead-letters`` and ``chronos admin replay``).

GET  /admin/v1/dead-letters?reason=CODE&limit=N&cursor=C
     the dead letters in the topic's order per partition (oldest first), each with its reason,
     code, source topic/partition/offset, original headers, when, and whether it was replayed;
     ``next_cursor`` while the topic holds more
POST /admin/v1/dead-letters/replay   {"reason": CODE} or {"records": ["P:O", ...]}, optionally
     "dry_run": true and "resume": the previous answer's token; answers the counts, and the
     records refused (they cannot make a valid input record) with why

The node reads the topic with a consumer of its own per request, on assigned partitions (no
consumer group, nothing committed), for at most ``BUDGET_S`` seconds and ``READ_MAX_BYTES``
bytes a request: a page that reaches either ends early with a cursor; a replay by reason
answers ``complete: false`` and a ``resume`` token after the batch that spent it (pass it back
to go on; nothing is replayed twice either way). What the replay markers name is kept between
requests (``MarkerIndex``): each request reads only the markers written since the last, after
claiming the topic (chronos.admin.deadletters.replay: a replay on another node or the command
line is fenced, and stops; "once each" holds across the cluster).

One dead-letter request runs at a time on a node: another waits ``LOCK_WAIT_S`` for it, then is
answered 409 (an HTTP worker is never held waiting for long: /health shares them). Every wait of
a request (the claim, a batch's commit) ends by ``REQUEST_BUDGET_S``, within the HTTP server's
own deadline.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
import time
from typing import Any

from chronos.admin.audit import AdminAudit
from chronos.admin.deadletters.replay import Budget, Progress, Replayer
from chronos.admin.deadletters.topic import (
    DeadLetter,
    DeadLetterTopic,
    MarkerIndex,
    NotADeadLetter,
    ReplayError,
    ReplayTakenOver,
    parse_position,
)
from chronos.admin.params import PAGE_MAX_BYTES, ApiError, parse_limit, parse_query
from chronos.config.settings import Settings
from chronos.errors import ConfigError

log = logging.getLogger(__name__)

BUDGET_S = 5.0  # a request reads (and replays) for about this long at most
REQUEST_BUDGET_S = 10.0  # every wait of a request ends by then (the HTTP deadline is 15 s)
COMMIT_RESERVE_S = 3.0  # of which a replay's last batch keeps this much for its commit
LOCK_WAIT_S = 1.0  # how long a request waits for the one under way on this node
MARKERS_BUDGET_S = 2.0  # of which reading the new replay markers takes at most this
READ_MAX_BYTES = 32 * 1024 * 1024  # keys, values and headers read from the topic a request
DEFAULT_LIMIT = 100
MAX_CHOSEN = 100  # records one replay request may name (each is read on its own)
MAX_CODE_LENGTH = 100
CONNECT_TIMEOUT_S = 5.0
# The consumer's prefetch, bounded: a request never holds more than this of the topic.
CONSUMER_BOUNDS = {"fetch.max.bytes": 8 * 1024 * 1024, "queued.max.messages.kbytes": 8 * 1024}


def encode_cursor(position: dict[int, int]) -> str:
    text = ",".join(f"{p}:{o}" for p, o in sorted(position.items()))
    return base64.urlsafe_b64encode(text.encode("ascii")).decode("ascii").rstrip("=")


def decode_cursor(raw: str, name: str) -> dict[int, int]:
    try:
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("ascii")
        if not text or len(raw) > 1024:
            raise ValueError(raw)
        return dict(parse_position(part) for part in text.split(","))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ApiError(400, f"{name} is not one this API gave out") from None


def _code(raw: Any, name: str) -> str:
    if not isinstance(raw, str) or not raw or len(raw) > MAX_CODE_LENGTH or "\x00" in raw:
        raise ApiError(400, f"{name} must be a reason code (e.g. topic_not_allowed)")
    return raw


class DeadLetterEndpoints:
    ACTIONS = ("replay",)

    def __init__(self, settings: Settings, audit: AdminAudit):
        self.settings = settings
        self.audit = audit
        self.index = MarkerIndex()
        self._lock = threading.Lock()

    def _topic(self) -> DeadLetterTopic:
        from confluent_kafka import KafkaException

        try:
            return DeadLetterTopic(self.settings, CONNECT_TIMEOUT_S, CONSUMER_BOUNDS)
        except ConfigError as exc:
            raise ApiError(404, str(exc)) from None
        except KafkaException as exc:
            raise ApiError(503, f"Kafka is unavailable ({exc.args[0]}); try again") from None

    def _run(self, work: Any) -> tuple[int, dict[str, Any]]:
        from confluent_kafka import KafkaException

        if not self._lock.acquire(timeout=LOCK_WAIT_S):
            raise ApiError(
                409,
                "another dead-letter request is under way on this node (a replay takes up to "
                f"{REQUEST_BUDGET_S:.0f} s): try again in a few seconds",
            )
        try:
            with self._topic() as dlq:
                return work(dlq)  # type: ignore[no-any-return]
        except NotADeadLetter as exc:
            raise ApiError(404, str(exc)) from None
        except ReplayTakenOver as exc:
            raise ApiError(409, str(exc)) from None
        except (KafkaException, ReplayError) as exc:
            raise ApiError(503, f"Kafka: {exc}; try again") from None
        finally:
            self._lock.release()

    def _markers(self, dlq: DeadLetterTopic, started: float) -> bool:
        return self.index.catch_up(dlq, started + MARKERS_BUDGET_S, READ_MAX_BYTES)

    # -- GET /admin/v1/dead-letters

    def browse(self, query: str) -> tuple[int, dict[str, Any]]:
        params = parse_query(query, frozenset({"reason", "limit", "cursor"}))
        reason = None if "reason" not in params else _code(params["reason"], "reason")
        limit = parse_limit(params.get("limit", str(DEFAULT_LIMIT)))
        starts = decode_cursor(params["cursor"], "cursor") if "cursor" in params else {}
        return self._run(lambda dlq: self._page(dlq, reason, limit, starts))

    def _page(
        self, dlq: DeadLetterTopic, reason: str | None, limit: int, starts: dict[int, int]
    ) -> tuple[int, dict[str, Any]]:
        started = time.monotonic()
        known = self._markers(dlq, started)
        position = dict(starts)
        found: list[DeadLetter] = []
        read = shown = 0
        more = False
        for letter in dlq.scan(starts):
            budget_spent = read >= READ_MAX_BYTES or time.monotonic() >= started + BUDGET_S
            if (
                len(found) >= limit
                or (found and shown >= PAGE_MAX_BYTES)
                or (read and budget_spent)
            ):
                more = True
                break
            position[letter.partition] = letter.offset + 1
            read += letter.size
            if letter.is_marker or (reason is not None and letter.code != reason):
                continue
            found.append(letter)
            shown += letter.size - len(letter.value or b"")
        done = self.index.done

        def replayed(letter: DeadLetter) -> bool | None:
            at = (letter.partition, letter.offset)
            return True if at in done else (False if known else None)

        return 200, {
            "topic": dlq.topic,
            "dead_letters": [d.json(replayed(d)) for d in found],
            "next_cursor": encode_cursor(position) if more else None,
            "replayed_known": known,
        }

    # -- POST /admin/v1/dead-letters/replay

    def replay(self, query: str, raw: bytes, who: str) -> tuple[int, dict[str, Any]]:
        started = time.monotonic()
        parse_query(query, frozenset())
        reason, records, dry_run, starts = _replay_body(raw)
        return self._run(
            lambda dlq: self._replay(dlq, reason, records, dry_run, starts, who, started)
        )

    def _replay(
        self,
        dlq: DeadLetterTopic,
        reason: str | None,
        records: list[tuple[int, int]] | None,
        dry_run: bool,
        starts: dict[int, int],
        who: str,
        started: float,
    ) -> tuple[int, dict[str, Any]]:
        answer: dict[str, Any] = {
            "topic": dlq.topic,
            "to": self.settings.input_topic,
            "reason": reason,
            "dry_run": dry_run,
        }
        deadline = started + REQUEST_BUDGET_S
        replayer = Replayer(dlq, lambda _progress: None, self.index, deadline)
        if not dry_run:
            replayer.claim()  # any replay elsewhere is fenced: the markers read next name all
        # The reading's budgets start once the topic is claimed (the first claim on a broker
        # can take seconds), and leave the last batch time for its commit.
        now = time.monotonic()
        reading_ends = min(now + BUDGET_S, deadline - COMMIT_RESERVE_S)
        markers_end = min(now + MARKERS_BUDGET_S, reading_ends)
        if not self.index.catch_up(dlq, markers_end, READ_MAX_BYTES):
            # Not all the markers read yet: replaying now could replay a record twice. The
            # next request reads on; a replay by reason goes on from where it was asked to
            # start (from the start: every partition from its first offset, never "").
            resume = None
            if reason is not None:
                resume = encode_cursor(starts or dict.fromkeys(dlq.partitions, 0))
            return 200, {**answer, **_counts(Progress()), "complete": False, "resume": resume}
        try:
            if records is not None:
                progress = replayer.chosen(records, dry_run=dry_run)
            else:
                assert reason is not None
                budget = Budget(until=reading_ends, max_bytes=READ_MAX_BYTES)
                progress = replayer.by_code(reason, dry_run=dry_run, starts=starts, budget=budget)
        except ReplayError:
            if not dry_run and replayer.progress.replayed:  # what went before it stopped
                self._record(replayer.progress, reason, records, who, dlq.topic, False)
            raise
        resume = None if progress.resume is None else encode_cursor(progress.resume)
        if not dry_run:
            self._record(progress, reason, records, who, dlq.topic, resume is None)
        return 200, {**answer, **_counts(progress), "complete": resume is None, "resume": resume}

    def _record(
        self,
        progress: Progress,
        reason: str | None,
        records: list[tuple[int, int]] | None,
        who: str,
        topic: str,
        complete: bool,
    ) -> None:
        """Log and audit a replay (what it replayed, also when it stopped on an error)."""
        target: dict[str, Any] = {"dead_letter_topic": topic}
        if reason is not None:
            target["reason"] = reason
        else:
            target["records"] = [f"{p}:{o}" for p, o in records or ()]
        log.info(
            "%d dead letters replayed to %s through the admin API by %s (%s; %d already "
            "replayed, %d refused)",
            progress.replayed,
            self.settings.input_topic,
            who,
            f"reason {reason}" if reason is not None else f"{len(records or ())} chosen",
            progress.skipped,
            progress.refused,
            extra={"event": "dead_letters_replayed", "count": progress.replayed},
        )
        self.audit.operator(
            "bulk",
            who,
            target,
            count=progress.replayed,
            details={"action": "replay", "complete": complete},
        )


def _counts(progress: Progress) -> dict[str, Any]:
    return {
        "replayed": progress.replayed,
        "already_replayed": progress.skipped,
        "looked_at": progress.scanned,
        "refused": progress.refused,
        "refusals": [{"record": at, "reason": why} for at, why in progress.refusals],
    }


def _replay_body(
    raw: bytes,
) -> tuple[str | None, list[tuple[int, int]] | None, bool, dict[int, int]]:
    usage = (
        'expected a JSON object with exactly one of "reason" (a code) and "records" (a list '
        'of "PARTITION:OFFSET"), and optionally "dry_run" (a boolean) and "resume" (with '
        '"reason": the token of the previous answer)'
    )
    try:
        body = json.loads(raw.decode("utf-8")) if raw else None
    except (UnicodeDecodeError, ValueError):
        raise ApiError(400, f"the body is not JSON: {usage}") from None
    if not isinstance(body, dict) or set(body) - {"reason", "records", "dry_run", "resume"}:
        raise ApiError(400, usage)
    if ("reason" in body) == ("records" in body):
        raise ApiError(400, usage)
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise ApiError(400, f'"dry_run" must be true or false: {usage}')
    if "records" in body:
        chosen = body["records"]
        if "resume" in body:
            raise ApiError(400, f'"resume" goes with "reason" only: {usage}')
        if not isinstance(chosen, list) or not 1 <= len(chosen) <= MAX_CHOSEN:
            raise ApiError(400, f'"records" must list 1 to {MAX_CHOSEN} records: {usage}')
        try:
            records = [parse_position(r if isinstance(r, str) else "") for r in chosen]
        except ValueError as exc:
            raise ApiError(400, f'"records": {exc}') from None
        return None, records, dry_run, {}
    reason = _code(body["reason"], '"reason"')
    resume = body.get("resume")
    if resume is not None and not isinstance(resume, str):
        raise ApiError(400, f'"resume" must be the previous answer\'s token: {usage}')
    return reason, None, dry_run, {} if resume is None else decode_cursor(resume, '"resume"')
