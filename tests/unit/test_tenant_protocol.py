"""The tenant of a message: the ``chronosTenant`` header, or a prefix of the key when
``CHRONOS_TENANT_FROM_KEY`` names a separator; absent: the default tenant. Never relayed."""

from __future__ import annotations

import pytest

from chronos.protocol import (
    CHRONOS_HEADERS,
    DEADLINE_HEADER,
    DEFAULT_TENANT,
    MESSAGE_ID_HEADER,
    TENANT_HEADER,
    Rejection,
    ScheduledMessage,
    parse_record,
)


def _base(extra: list[tuple[str, bytes | None]] | None = None) -> list[tuple[str, bytes | None]]:
    return [
        (MESSAGE_ID_HEADER, b"id-1"),
        (DEADLINE_HEADER, b"2030-01-01T00:00:00.000Z"),
        *(extra or []),
    ]


def _ok(record: ScheduledMessage | Rejection) -> ScheduledMessage:
    assert isinstance(record, ScheduledMessage), record
    return record


def test_the_tenant_header_is_a_chronos_header() -> None:
    assert TENANT_HEADER == "chronosTenant"
    assert TENANT_HEADER in CHRONOS_HEADERS


def test_the_tenant_header_names_the_tenant_and_is_not_relayed() -> None:
    parsed = _ok(parse_record(b"k", b"v", _base([(TENANT_HEADER, b"acme"), ("x", b"1")])))
    assert parsed.tenant == "acme"
    assert parsed.headers == [("x", b"1")]


def test_no_tenant_is_the_default_tenant() -> None:
    assert DEFAULT_TENANT == ""
    assert _ok(parse_record(b"acme:1", b"v", _base())).tenant == DEFAULT_TENANT


def test_the_key_prefix_names_the_tenant_when_configured() -> None:
    assert _ok(parse_record(b"acme:1:x", b"v", _base(), tenant_from_key=":")).tenant == "acme"
    # no separator in the key, a null key, a key that is not UTF-8: the default tenant
    assert _ok(parse_record(b"acme", b"v", _base(), tenant_from_key=":")).tenant == ""
    assert _ok(parse_record(None, b"v", _base(), tenant_from_key=":")).tenant == ""
    assert _ok(parse_record(b"\xff:1", b"v", _base(), tenant_from_key=":")).tenant == ""
    # the header wins over the key
    record = parse_record(b"acme:1", b"v", _base([(TENANT_HEADER, b"beta")]), tenant_from_key=":")
    assert _ok(record).tenant == "beta"


def test_a_key_prefix_longer_than_a_tenant_is_cut_to_128_characters() -> None:
    key = ("é" * 200 + ":1").encode()
    assert _ok(parse_record(key, b"v", _base(), tenant_from_key=":")).tenant == "é" * 128


@pytest.mark.parametrize(
    "raw",
    [b"", b"x" * 129, b"\xff", b"a\x00b"],
    ids=["empty", "too-long", "not-utf8", "nul"],
)
def test_a_bad_tenant_header_is_rejected(raw: bytes) -> None:
    record = parse_record(b"k", b"v", _base([(TENANT_HEADER, raw)]))
    assert isinstance(record, Rejection)
    assert record.code == "invalid_tenant"
    assert TENANT_HEADER in record.reason


def test_a_repeated_tenant_header_is_rejected() -> None:
    record = parse_record(b"k", b"v", _base([(TENANT_HEADER, b"a"), (TENANT_HEADER, b"b")]))
    assert isinstance(record, Rejection)
    assert record.code == "duplicate_header"


def test_128_characters_of_any_script_are_a_tenant() -> None:
    name = "ü" * 128
    assert _ok(parse_record(b"k", b"v", _base([(TENANT_HEADER, name.encode())]))).tenant == name
