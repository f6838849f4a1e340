"""Reading a dead letter (chronos.admin.deadletters.topic): its reason, code, source and original
headers; replay markers; positions. tests/e2e/test_producer_cli_e2e.py replays on the broker."""

from __future__ import annotations

import pytest

from chronos.admin.deadletters.topic import (
    MARKER_CODE,
    REPLAYED_HEADER,
    UNKNOWN_CODE,
    original_headers,
    parse_position,
    read,
)
from chronos.protocol import (
    DEAD_LETTER_CODE_HEADER,
    DEAD_LETTER_REDUCED_HEADER,
    Headers,
    dead_letter_headers,
)


def test_a_dead_letter_reads_back_its_reason_code_source_and_original_headers() -> None:
    original: Headers = [("chronosMessageId", b"m"), ("x", b"1"), ("x", None)]
    headers = dead_letter_headers(
        original, "header chronosTopic 'a' ...", "in/2/7", "topic_not_allowed"
    )
    letter = read(1, 42, 1_900_000_000_123, b"k", b"v", headers)
    assert (letter.code, letter.source, letter.reason) == (
        "topic_not_allowed",
        "in/2/7",
        "header chronosTopic 'a' ...",
    )
    assert letter.headers == original  # the dead-letter headers removed, order and repeats kept
    assert (letter.position, letter.when) == ("1:42", "2030-03-17T17:46:40.123Z")
    assert not letter.is_marker and letter.reduced is None
    shown = letter.json(replayed=True)
    assert shown["headers"][1] == {"name": "x", "value": "MQ=="}
    assert (shown["value_size"], shown["replayed"], shown["key"]) == (1, True, "aw==")


def test_a_dead_letter_written_before_codes_and_a_reduced_one() -> None:
    legacy = read(0, 0, 0, None, None, [("chronosDeadLetterReason", b"old")])
    assert legacy.code == UNKNOWN_CODE
    reduced = [
        *dead_letter_headers([], "r", "s", "publish_failed"),
        (DEAD_LETTER_REDUCED_HEADER, b"value 9 bytes"),
    ]
    letter = read(0, 1, 0, None, None, reduced)
    assert (letter.reduced, letter.headers) == ("value 9 bytes", [])


def test_a_replay_marker_names_its_offsets() -> None:
    marker = read(
        2, 9, 0, None, None, [(REPLAYED_HEADER, b"3,4,8"), (DEAD_LETTER_CODE_HEADER, b"x")]
    )
    assert marker.is_marker and marker.marks == (3, 4, 8)
    assert MARKER_CODE == "replay_marker"


def test_original_headers_drop_only_chronos_dead_letter_headers() -> None:
    headers: Headers = [("a", b"1"), (DEAD_LETTER_CODE_HEADER, b"c"), ("chronosDeadLetterX", b"")]
    assert original_headers(headers) == [("a", b"1"), ("chronosDeadLetterX", b"")]


@pytest.mark.parametrize(("raw", "expected"), [("0:42", (0, 42)), ("12:0", (12, 0))])
def test_positions(raw: str, expected: tuple[int, int]) -> None:
    assert parse_position(raw) == expected


@pytest.mark.parametrize("raw", ["", "1", "a:1", "1:-1", "1:2:3", ":3"])
def test_bad_positions(raw: str) -> None:
    with pytest.raises(ValueError, match="PARTITION:OFFSET"):
        parse_position(raw)


def test_a_sources_parts_and_the_apis_cursor_and_replay_body() -> None:
    from chronos.admin.deadletters.api import _replay_body, decode_cursor, encode_cursor
    from chronos.admin.deadletters.topic import source_position
    from chronos.admin.params import ApiError

    assert source_position("orders.in/2/40") == ("orders.in", 2, 40)
    assert source_position("chronos/invoice-7") == (None, None, None)
    assert decode_cursor(encode_cursor({0: 3, 2: 41}), "cursor") == {0: 3, 2: 41}
    assert _replay_body(b'{"records": ["0:1", "2:7"], "dry_run": true}') == (
        None,
        [(0, 1), (2, 7)],
        True,
        {},
    )
    resume = encode_cursor({1: 500})
    assert _replay_body(b'{"reason": "expired", "resume": "%s"}' % resume.encode()) == (
        "expired",
        None,
        False,
        {1: 500},
    )
    for raw in (
        b"",
        b"[]",
        b'{"reason": 1}',
        b'{"records": []}',
        b'{"records": ["0:1"], "resume": "x"}',
        b'{"reason": "a", "other": 1}',
        b'{"reason": "a", "resume": ""}',
    ):
        with pytest.raises(ApiError) as refused:
            _replay_body(raw)
        assert refused.value.status == 400, raw
    for bad in ("", "!!", encode_cursor({})):
        with pytest.raises(ApiError):
            decode_cursor(bad, "cursor")
