"""The Chronos message protocol: header parsing, deadlines, rejections, header storage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chronos.config.validation import validate
from chronos.protocol import (
    CHRONOS_HEADERS,
    DEAD_LETTER_CODE_HEADER,
    DEAD_LETTER_HEADERS,
    DEAD_LETTER_REASON_HEADER,
    DEAD_LETTER_SOURCE_HEADER,
    DEADLINE_HEADER,
    MAX_ID_LENGTH,
    MESSAGE_ID_HEADER,
    DeadlineError,
    Rejection,
    ScheduledMessage,
    dead_letter_headers,
    decode_headers,
    encode_headers,
    format_deadline,
    format_epoch,
    parse_deadline,
    parse_record,
    relay_headers,
)


def _headers(
    message_id: bytes | None = b"id-1", deadline: bytes | None = b"2030-01-01T00:00:00.000Z"
) -> list[tuple[str, bytes | None]]:
    out: list[tuple[str, bytes | None]] = []
    if message_id is not None:
        out.append((MESSAGE_ID_HEADER, message_id))
    if deadline is not None:
        out.append((DEADLINE_HEADER, deadline))
    return out


def _ok(record: ScheduledMessage | Rejection) -> ScheduledMessage:
    assert isinstance(record, ScheduledMessage), record
    return record


def _rejected(record: ScheduledMessage | Rejection) -> Rejection:
    assert isinstance(record, Rejection), record
    return record


# ------------------------------------------------------------------------------ header names


def test_header_names_are_those_of_the_design() -> None:
    assert MESSAGE_ID_HEADER == "chronosMessageId"
    assert DEADLINE_HEADER == "chronosDeadline"
    assert DEAD_LETTER_REASON_HEADER == "chronosDeadLetterReason"
    assert CHRONOS_HEADERS == {  # noqa: SIM300 - the constant is the value under test
        "chronosMessageId",
        "chronosDeadline",
        "chronosAction",
        "chronosTopic",
        "chronosTenant",
        "chronosEvery",
        "chronosCron",
        "chronosTimeZone",
        "chronosUntil",
        "chronosMissed",
        "chronosExpires",
    }


# ------------------------------------------------------------------------------ deadlines


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # The design's example: milliseconds, no offset = UTC.
        ("2022-12-01T11:09:01.123", datetime(2022, 12, 1, 11, 9, 1, 123000, tzinfo=UTC)),
        ("2022-12-01T11:09:01.123Z", datetime(2022, 12, 1, 11, 9, 1, 123000, tzinfo=UTC)),
        ("2022-12-01T11:09:01.123z", datetime(2022, 12, 1, 11, 9, 1, 123000, tzinfo=UTC)),
        # Offsets are converted to UTC.
        ("2022-12-01T11:09:01.123+02:00", datetime(2022, 12, 1, 9, 9, 1, 123000, tzinfo=UTC)),
        ("2022-12-01T11:09:01.123-05:30", datetime(2022, 12, 1, 16, 39, 1, 123000, tzinfo=UTC)),
        ("2022-12-01T11:09:01.123+00:00", datetime(2022, 12, 1, 11, 9, 1, 123000, tzinfo=UTC)),
        ("2022-12-01T00:30:00.000+01:00", datetime(2022, 11, 30, 23, 30, 0, tzinfo=UTC)),
        ("2022-12-01T11:09:01.123+0200", datetime(2022, 12, 1, 9, 9, 1, 123000, tzinfo=UTC)),
        # Without fraction, shorter and longer fractions (sub-millisecond kept, not rounded).
        ("2022-12-01T11:09:01", datetime(2022, 12, 1, 11, 9, 1, tzinfo=UTC)),
        ("2022-12-01T11:09:01.1", datetime(2022, 12, 1, 11, 9, 1, 100000, tzinfo=UTC)),
        ("2022-12-01T11:09:01.123456", datetime(2022, 12, 1, 11, 9, 1, 123456, tzinfo=UTC)),
        ("2022-12-01 11:09:01.123Z", datetime(2022, 12, 1, 11, 9, 1, 123000, tzinfo=UTC)),
        # Leap day.
        ("2024-02-29T12:00:00.000Z", datetime(2024, 2, 29, 12, tzinfo=UTC)),
    ],
)
def test_parse_deadline(raw: str, expected: datetime) -> None:
    parsed = parse_deadline(raw)
    assert parsed == expected
    assert parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "tomorrow",
        "1669892941123",  # epoch millis are not ISO-8601
        "2022-12-01",  # a date is not an instant
        "2022-12-01T11:09",  # no seconds
        "2022-12-01T11:09:01.",  # empty fraction
        "2022-12-01T11:09:01.1234567",  # beyond microseconds
        "2022-12-01T11:09:01.123+02",  # truncated offset
        "2022-12-01T11:09:01.123 UTC",
        "2022-12-01T11:09:01.123Z trailing",
        "22-12-01T11:09:01.123",
        "2022/12/01T11:09:01.123",
    ],
)
def test_unparseable_deadline_is_an_error(raw: str) -> None:
    with pytest.raises(DeadlineError, match=DEADLINE_HEADER):
        parse_deadline(raw)


@pytest.mark.parametrize(
    "raw",
    [
        "2023-02-29T00:00:00.000Z",  # not a leap year
        "2022-02-30T00:00:00.000Z",
        "2022-13-01T00:00:00.000Z",
        "2022-00-10T00:00:00.000Z",
        "2022-12-32T00:00:00.000Z",
        "2022-12-01T24:00:00.000Z",
        "2022-12-01T11:60:00.000Z",
        "2022-12-01T11:09:60.000Z",  # no leap seconds
        "0000-01-01T00:00:00.000Z",  # there is no year 0
        "2022-12-01T11:09:01.123+24:00",  # offsets are within a day
        "2022-12-01T11:09:01.123+05:60",  # offset minutes are 00-59...
        "2022-12-01T11:09:01.123+05:75",  # ...not silently carried into the hours
        "2022-12-01T11:09:01.123-0275",
        "9999-12-31T23:59:59.999-01:00",  # beyond the last representable instant in UTC
        "0001-01-01T00:00:00.000+01:00",  # before the first one
    ],
)
def test_impossible_deadline_is_an_error(raw: str) -> None:
    with pytest.raises(DeadlineError):
        parse_deadline(raw)


def test_format_deadline_is_utc_milliseconds_z() -> None:
    instant = datetime(2022, 12, 1, 13, 9, 1, 123999, tzinfo=timezone(timedelta(hours=2)))
    assert format_deadline(instant) == "2022-12-01T11:09:01.123Z"


@given(
    st.one_of(
        st.floats(min_value=0, max_value=253_402_214_399, allow_nan=False),  # to 9999-12-30
        st.integers(min_value=0, max_value=4_102_444_800_000).map(lambda ms: ms / 1000),
        st.integers(min_value=0, max_value=4_102_444_800_000_000).map(lambda us: us / 1e6),
    ),
    st.lists(st.floats(min_value=-2, max_value=2, allow_nan=False), max_size=4),
)
def test_the_firing_paths_format_of_an_epoch_is_the_deadlines_format(
    epoch: float, nearby: list[float]
) -> None:
    """A claimed row's deadline (seconds since the epoch, a float) is relayed as the canonical
    text, exactly as format_deadline writes the datetime it stands for, including the
    microsecond rounding at a millisecond's or a second's edge, whatever the instant before it
    (the whole second's text is kept from the call before)."""
    for value in (*[epoch + d for d in nearby if epoch + d >= 0], epoch):
        assert format_epoch(value) == format_deadline(datetime.fromtimestamp(value, UTC))


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 1),
        max_value=datetime(9999, 12, 30),
        timezones=st.just(UTC),
    )
)
def test_format_then_parse_keeps_the_millisecond(instant: datetime) -> None:
    parsed = parse_deadline(format_deadline(instant))
    assert parsed == instant.replace(microsecond=instant.microsecond // 1000 * 1000)


# ------------------------------------------------------------------------------ parse_record


def test_valid_record_becomes_a_scheduled_message() -> None:
    headers = [
        ("trace", b"\x00\xff"),
        (MESSAGE_ID_HEADER, b"3767d5c7-aced-45e5-91f1-3f7ad8205a3f"),
        ("empty", b""),
        (DEADLINE_HEADER, b"2022-12-01T11:09:01.123"),
        ("none", None),
        ("trace", b"second"),
    ]
    message = _ok(parse_record(b"\x00key", b"\xffvalue", headers))
    assert message.id == "3767d5c7-aced-45e5-91f1-3f7ad8205a3f"
    assert message.deadline == datetime(2022, 12, 1, 11, 9, 1, 123000, tzinfo=UTC)
    assert message.key == b"\x00key"
    assert message.value == b"\xffvalue"
    # Chronos headers are not relayed; the others are, in order, repeats and None kept.
    assert message.headers == [
        ("trace", b"\x00\xff"),
        ("empty", b""),
        ("none", None),
        ("trace", b"second"),
    ]


def test_null_key_and_tombstone_value_are_kept() -> None:
    message = _ok(parse_record(None, None, _headers()))
    assert message.key is None
    assert message.value is None
    assert message.headers == []


@pytest.mark.parametrize(
    ("headers", "code", "reason"),
    [
        (None, "missing_id", f"missing header {MESSAGE_ID_HEADER}"),
        ([], "missing_id", f"missing header {MESSAGE_ID_HEADER}"),
        (_headers(message_id=None), "missing_id", f"missing header {MESSAGE_ID_HEADER}"),
        (_headers(deadline=None), "missing_deadline", f"missing header {DEADLINE_HEADER}"),
        (_headers(message_id=b""), "invalid_id", f"header {MESSAGE_ID_HEADER} is empty"),
        (
            [(MESSAGE_ID_HEADER, None), (DEADLINE_HEADER, b"2030-01-01T00:00:00Z")],
            "invalid_id",
            "empty",
        ),
        (_headers(message_id=b"\xff\xfe"), "invalid_id", "not valid UTF-8"),
        (_headers(message_id=b"a\x00b"), "invalid_id", "NUL"),
        (_headers(message_id=b"x" * (MAX_ID_LENGTH + 1)), "invalid_id", "129 characters long"),
        (_headers(deadline=b""), "invalid_deadline", "empty"),
        (_headers(deadline=b"next tuesday"), "invalid_deadline", "not ISO-8601"),
        (_headers(deadline=b"2023-02-29T00:00:00.000Z"), "invalid_deadline", "not a valid instant"),
        (_headers(deadline=b"\xff2030-01-01"), "invalid_deadline", "not ASCII"),
        (
            _headers(deadline=b"2030-01-01T00:00:00.000Z" + b" " * 64),
            "invalid_deadline",
            "too long",
        ),
        ([*_headers(), (MESSAGE_ID_HEADER, b"other")], "duplicate_header", "appears 2 times"),
        (
            [*_headers(), (DEADLINE_HEADER, b"2031-01-01T00:00:00Z")],
            "duplicate_header",
            "appears 2 times",
        ),
        ([*_headers(), ("bad\x00name", b"v")], "invalid_header", "not storable"),
    ],
)
def test_bad_input_is_rejected_with_a_reason(
    headers: list[tuple[str, bytes | None]] | None, code: str, reason: str
) -> None:
    rejection = _rejected(parse_record(b"k", b"v", headers))
    assert rejection.code == code
    assert reason in rejection.reason


def test_id_length_limit_counts_characters_not_bytes() -> None:
    longest = "é" * MAX_ID_LENGTH  # 256 bytes, 128 characters: fits varchar(128)
    assert _ok(parse_record(None, b"", _headers(message_id=longest.encode()))).id == longest
    too_long = ("é" * (MAX_ID_LENGTH + 1)).encode()
    assert _rejected(parse_record(None, b"", _headers(message_id=too_long))).code == "invalid_id"


def test_max_delay_rejects_deadlines_too_far_ahead() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    ok = parse_record(
        None,
        b"",
        _headers(deadline=b"2030-01-01T00:00:10.000Z"),
        now=now,
        max_delay=timedelta(seconds=10),
    )
    assert isinstance(ok, ScheduledMessage)
    far = parse_record(
        None,
        b"",
        _headers(deadline=b"2030-01-01T00:00:10.001Z"),
        now=now,
        max_delay=timedelta(seconds=10),
    )
    assert _rejected(far).code == "max_delay_exceeded"
    assert "10000 ms" in _rejected(far).reason


def test_past_deadlines_are_valid() -> None:
    """A lapsed deadline is not bad input: it is fired at once (the fast path)."""
    message = _ok(parse_record(None, b"", _headers(deadline=b"1999-12-31T23:59:59.999Z")))
    assert message.deadline.year == 1999


def test_dead_letter_headers_keep_the_originals_and_add_the_reason_and_its_code() -> None:
    original = [("a", b"1"), (MESSAGE_ID_HEADER, b"x"), ("a", None)]
    out = dead_letter_headers(
        original, "missing header chronosDeadline", "in/0/42", "missing_deadline"
    )
    assert out[:3] == original
    assert out[3:] == [
        (DEAD_LETTER_REASON_HEADER, b"missing header chronosDeadline"),
        (DEAD_LETTER_SOURCE_HEADER, b"in/0/42"),
        (DEAD_LETTER_CODE_HEADER, b"missing_deadline"),
    ]
    assert dead_letter_headers(None, "r", "s", "c")[0] == (DEAD_LETTER_REASON_HEADER, b"r")
    assert DEAD_LETTER_CODE_HEADER == "chronosDeadLetterCode"
    assert {name for name, _ in out[3:]} <= set(DEAD_LETTER_HEADERS)


# ------------------------------------------------------------------------------ header storage

header_names = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=20
)
header_values = st.one_of(st.none(), st.binary(max_size=64))


@given(st.lists(st.tuples(header_names, header_values), max_size=12))
def test_headers_round_trip_byte_exact_through_storage(
    headers: list[tuple[str, bytes | None]],
) -> None:
    assert decode_headers(encode_headers(headers)) == headers


@given(st.lists(st.tuples(header_names, header_values), max_size=8))
def test_every_non_chronos_header_is_relayed_in_order(
    extra: list[tuple[str, bytes | None]],
) -> None:
    extra = [(n, v) for n, v in extra if n not in CHRONOS_HEADERS]
    mixed = extra[:2] + _headers() + extra[2:]
    message = _ok(parse_record(None, None, mixed))
    assert message.headers == extra


def test_no_headers_are_stored_as_null() -> None:
    assert encode_headers([]) is None
    assert decode_headers(None) == []


def test_the_relayed_id_comes_with_the_scheduled_instant() -> None:
    """Every occurrence of a series shares its id: the relayed identity of a fired record is
    (id, scheduled instant), so the instant is relayed whenever the id is (under the configured
    deadline header, else ``chronosScheduledFor``). A one-shot's id header is unchanged."""
    first = datetime(2030, 1, 1, 10, tzinfo=UTC).timestamp()  # as a claimed row holds it
    second = first + 86_400
    own: list[tuple[str, bytes | None]] = [("trace", b"t")]
    assert relay_headers(own, "daily", first, "chronosMessageId", "") == [
        ("trace", b"t"),
        ("chronosMessageId", b"daily"),
        ("chronosScheduledFor", b"2030-01-01T10:00:00.000Z"),
    ]
    occurrences = [relay_headers([], "daily", t, "chronosMessageId", "") for t in (first, second)]
    assert occurrences[0] != occurrences[1]
    assert relay_headers([], "daily", first, "chronosMessageId", "firedFor") == [
        ("chronosMessageId", b"daily"),
        ("firedFor", b"2030-01-01T10:00:00.000Z"),
    ]
    assert relay_headers(own, "daily", first, "", "") == own  # off: byte-exact
    assert relay_headers([], "daily", first, "", "firedFor") == [
        ("firedFor", b"2030-01-01T10:00:00.000Z")
    ]


def test_the_relayed_id_header_may_not_take_the_instants_name() -> None:
    from chronos.config.settings import load
    from chronos.errors import ConfigError

    env = {"CHRONOS_DATABASE_URL": "postgresql://u@h/d"}
    with pytest.raises(ConfigError, match="CHRONOS_RELAY_ID_HEADER"):
        validate(load(environ={**env, "CHRONOS_RELAY_ID_HEADER": "chronosScheduledFor"}))
