"""Reading ``bench.json`` back: typed fields of a JSON object, None when missing or of another
type."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Json = Mapping[str, Any]


def json_map(data: Json | None, key: str) -> Json:
    """``data[key]`` when it is an object, else an empty one."""
    value = None if data is None else data.get(key)
    return value if isinstance(value, Mapping) else {}


def json_num(data: Json, key: str) -> float | None:
    """A number as JSON had it (an int stays an int: the report prints ``4`` and ``4.0``
    differently), None when missing."""
    value = data.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def json_int(data: Json, key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def json_str(data: Json, key: str) -> str | None:
    value = data.get(key)
    return None if value is None else str(value)
