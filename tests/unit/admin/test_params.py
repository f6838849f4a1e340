"""The admin API's request side: cursors, authentication, timestamps and query parameters
(chronos.admin.params)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone

import pytest

from chronos.admin import access
from chronos.admin import params as admin_params
from chronos.admin.messages import filters as admin_filters
from chronos.admin.params import ApiError
from tests.unit.admin.helpers import TOKEN

# ------------------------------------------------------------------------------ cursors


@pytest.mark.parametrize(
    ("deadline", "message_id"),
    [
        (datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), "plain"),
        (datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=5))), "ünï/cödé?&=#"),
        (datetime(1, 1, 1, tzinfo=UTC), "x" * 128),
        (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), '"quoted"\\'),
    ],
)
def test_a_cursor_round_trips_exactly_and_is_url_safe(deadline: datetime, message_id: str) -> None:
    token = admin_params.encode_cursor(deadline, message_id)
    assert all(c.isalnum() or c in "-_" for c in token)
    assert admin_params.decode_cursor(token) == (deadline, message_id)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "!!!!",
        "A" * 2000,
        "bm90IGpzb24",  # "not json"
        base64.urlsafe_b64encode(b"[1, 2]").decode(),
        base64.urlsafe_b64encode(b'{"v": 2, "d": "2030-01-01T00:00:00Z", "i": "a"}').decode(),
        base64.urlsafe_b64encode(b'{"v": 1, "d": "2030-01-01T00:00:00", "i": "a"}').decode(),
        base64.urlsafe_b64encode(b'{"v": 1, "d": "tomorrow", "i": "a"}').decode(),
        base64.urlsafe_b64encode(b'{"v": 1, "d": "2030-01-01T00:00:00Z", "i": ""}').decode(),
        base64.urlsafe_b64encode(b'{"v": 1, "d": "2030-01-01T00:00:00Z", "i": 5}').decode(),
        base64.urlsafe_b64encode(b'{"v": 1, "d": "2030-01-01T00:00:00Z"}').decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
def test_a_cursor_not_made_by_the_api_is_a_400(token: str) -> None:
    with pytest.raises(ApiError) as err:
        admin_params.decode_cursor(token)
    assert err.value.status == 400


def test_an_altered_cursor_is_refused_or_points_elsewhere_never_crashes() -> None:
    token = admin_params.encode_cursor(datetime(2030, 1, 1, tzinfo=UTC), "abc")
    for i in range(len(token)):
        for replacement in "A_-0":
            altered = token[:i] + replacement + token[i + 1 :]
            try:
                deadline, message_id = admin_params.decode_cursor(altered)
            except ApiError as exc:
                assert exc.status == 400
            else:
                assert deadline.tzinfo is not None and admin_params.valid_id(message_id)


# ------------------------------------------------------------------------------ auth


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic dW5pdC10b2tlbg==",
        "Bearer wrong",
        f"Bearer {TOKEN}x",
        f"Bearer {TOKEN[:-1]}",
        f"Token {TOKEN}",
        f"Bearer{TOKEN}",
        "Bearer \udcff",
    ],
)
def test_auth_refuses_a_missing_or_wrong_token_with_401(header: str | None) -> None:
    with pytest.raises(ApiError) as err:
        access.check_auth(header, TOKEN)
    assert err.value.status == 401
    assert err.value.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", [f"Bearer {TOKEN}", f"bearer {TOKEN}", f"BEARER  {TOKEN} "])
def test_auth_accepts_the_token_whatever_the_scheme_case(header: str) -> None:
    access.check_auth(header, TOKEN)


def test_auth_compares_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []

    def compare(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return a == b

    monkeypatch.setattr("chronos.admin.access.hmac.compare_digest", compare)
    access.check_auth(f"Bearer {TOKEN}", TOKEN)
    assert calls == [(TOKEN.encode(), TOKEN.encode())]


# ------------------------------------------------------------------------------ parameters


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2030-01-02T03:04:05Z", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2030-01-02t03:04:05z", datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("2030-01-02T03:04:05.123456789+02:00", datetime(2030, 1, 2, 1, 4, 5, 123456, tzinfo=UTC)),
        ("2030-01-02T03:04:05.5-01:30", datetime(2030, 1, 2, 4, 34, 5, 500000, tzinfo=UTC)),
        ("2030-06-30T23:59:60Z", datetime(2030, 6, 30, 23, 59, 59, 999999, tzinfo=UTC)),
        ("0001-01-01T00:00:00+23:59", datetime.min.replace(tzinfo=UTC)),  # clamped
        ("9999-12-31T23:59:59-23:59", datetime.max.replace(tzinfo=UTC)),  # clamped
    ],
)
def test_rfc3339_timestamps_parse_as_utc(raw: str, expected: datetime) -> None:
    assert admin_params.parse_timestamp("deadline_from", raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "yesterday",
        "2030-01-02",  # a date alone
        "2030-01-02T03:04:05",  # no offset
        "2030-01-02 03:04:05Z",
        "20300102T030405Z",
        "2030-13-01T00:00:00Z",
        "2030-02-30T00:00:00Z",
        "2030-01-01T25:00:00Z",
        "2030-01-01T00:00:00+24:00",
        "2030-01-01T00:00:00Z\n",
        "1" * 100,
        "0000-01-01T00:00:00Z",
    ],
)
def test_anything_but_an_rfc3339_instant_is_a_400_naming_the_parameter(raw: str) -> None:
    with pytest.raises(ApiError) as err:
        admin_params.parse_timestamp("deadline_to", raw)
    assert err.value.status == 400 and "deadline_to" in err.value.message


@pytest.mark.parametrize(("raw", "value"), [(None, False), ("true", True), ("false", False)])
def test_booleans(raw: str | None, value: bool) -> None:
    assert admin_params.parse_bool("include_value", raw) is value


@pytest.mark.parametrize("raw", ["", "1", "0", "True", "yes", "true\n"])
def test_booleans_are_true_or_false_nothing_else(raw: str) -> None:
    with pytest.raises(ApiError) as err:
        admin_params.parse_bool("include_value", raw)
    assert err.value.status == 400


@pytest.mark.parametrize(("raw", "value"), [(None, 100), ("1", 1), ("1000", 1000), ("050", 50)])
def test_limit(raw: str | None, value: int) -> None:
    assert admin_params.parse_limit(raw) == value


@pytest.mark.parametrize(
    "raw", ["0", "1001", "-1", "+5", " 5", "5\n", "1_0", "1e2", "5.0", "", "x", "99999999"]
)
def test_limit_out_of_range_or_not_an_integer_is_a_400(raw: str) -> None:
    with pytest.raises(ApiError) as err:
        admin_params.parse_limit(raw)
    assert err.value.status == 400


def test_query_parameters_must_be_known_single_and_decodable() -> None:
    allowed = frozenset({"a", "b"})
    assert admin_params.parse_query("a=1&b=x%20y", allowed) == {"a": "1", "b": "x y"}
    assert admin_params.parse_query("", allowed) == {}
    for bad in ("c=1", "a=1&a=2", "a=%ff", "a=%00"):
        with pytest.raises(ApiError) as err:
            admin_params.parse_query(bad, allowed)
        assert err.value.status == 400, bad


def test_message_ids_are_percent_decoded_and_checked() -> None:
    assert admin_params.parse_message_id("a%2Fb%20%C3%A9") == "a/b é"
    assert admin_params.parse_message_id("x" * 128) == "x" * 128
    for bad in ("x" * 129, "%ff", "a%00"):
        with pytest.raises(ApiError) as err:
            admin_params.parse_message_id(bad)
        assert err.value.status == 400


def test_list_parameters() -> None:
    cursor = admin_params.encode_cursor(datetime(2030, 1, 1, tzinfo=UTC), "m")
    p = admin_filters.parse_list_params(
        f"state=parked&deadline_from=2030-01-01T00:00:00Z&limit=7&cursor={cursor}"
    )
    assert (p.where.state, p.limit, p.where.deadline_to) == ("parked", 7, None)
    assert p.where.deadline_from == datetime(2030, 1, 1, tzinfo=UTC)
    assert p.after == (datetime(2030, 1, 1, tzinfo=UTC), "m")
    with pytest.raises(ApiError):
        admin_filters.parse_list_params("state=ready")
