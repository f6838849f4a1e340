"""One-dimensional Postgres arrays in the binary wire format, built in one pass.

The enqueue statement takes a consumed batch as one array per column (``chronos.store.batch``).
The driver's generic list adapter inspects every list for its element type and adapts element by
element through the Python layers of the driver: for a batch of 2,000 messages and a dozen
columns that was a third of the intake process's Python time. Here each array is encoded
directly (header, then each element's length and bytes) into a ``bytes`` subclass that names its
array type; ``register`` teaches a connection to send those as they are.

Format (``array_send``): ndim, has-null flag, element type oid, then per dimension its length
and lower bound (1), then each element as a signed 32-bit length (-1: NULL) and its bytes; an
empty array has no dimension.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import psycopg
from psycopg import adapt, pq

_HEADER = struct.Struct("!iiIii")
_EMPTY = struct.Struct("!iiI")
_NULL = b"\xff\xff\xff\xff"
_LEN = struct.Struct("!i").pack
_INT4 = struct.Struct("!ii").pack  # an int4 element: its length (4), its value
_INT8 = struct.Struct("!iq").pack  # a timestamptz element: its length (8), its value
_POSTGRES_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class Array(bytes):
    """An encoded array; ``oid`` is its array type."""

    oid: ClassVar[int]
    element_oid: ClassVar[int]


class TextArray(Array):
    oid, element_oid = 1009, 25


class ByteaArray(Array):
    oid, element_oid = 1001, 17


class Int4Array(Array):
    oid, element_oid = 1007, 23


class TimestamptzArray(Array):
    oid, element_oid = 1185, 1184


def _array(kind: type[Array], count: int, has_null: bool, body: list[bytes]) -> Array:
    if not count:
        return kind(_EMPTY.pack(0, 0, kind.element_oid))
    return kind(_HEADER.pack(1, has_null, kind.element_oid, count, 1) + b"".join(body))


def _varlena(kind: type[Array], values: Sequence[bytes | None]) -> Array:
    """An array of variable-length elements (bytea, or text already encoded to UTF-8)."""
    body: list[bytes] = []
    add = body.append
    has_null = False
    for value in values:
        if value is None:
            add(_NULL)
            has_null = True
        else:
            add(_LEN(len(value)))
            add(value)
    return _array(kind, len(values), has_null, body)


def bytea_array(values: Sequence[bytes | None]) -> ByteaArray:
    return _varlena(ByteaArray, values)  # type: ignore[return-value]


def text_array(values: Sequence[str | None]) -> TextArray:
    encoded = [None if v is None else v.encode() for v in values]
    return _varlena(TextArray, encoded)  # type: ignore[return-value]


def int4_array(values: Sequence[int | None]) -> Int4Array:
    has_null = None in values
    body = [_NULL if v is None else _INT4(4, v) for v in values]
    return _array(Int4Array, len(values), has_null, body)  # type: ignore[return-value]


def timestamptz_array(values: Sequence[datetime | None]) -> TimestamptzArray:
    """Aware datetimes, as microseconds since 2000-01-01 UTC."""
    epoch, unit = _POSTGRES_EPOCH, _MICROSECOND
    has_null = None in values
    body = [_NULL if v is None else _INT8(8, (v - epoch) // unit) for v in values]
    return _array(TimestamptzArray, len(values), has_null, body)  # type: ignore[return-value]


class _ArrayDumper(adapt.Dumper):
    format = pq.Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return obj  # type: ignore[no-any-return]  # an Array is its own wire format


def register(adapters: adapt.AdaptersMap) -> None:
    """Send the arrays of this module as they are, each typed as its array type."""
    for kind in (TextArray, ByteaArray, Int4Array, TimestamptzArray):
        dumper = type(f"{kind.__name__}Dumper", (_ArrayDumper,), {"oid": kind.oid})
        adapters.register_dumper(kind, dumper)


# Every connection made after this import sends them (the store's, and any a probe opens to
# run the enqueue statement with ``encode_batch``'s parameters).
register(psycopg.adapters)
