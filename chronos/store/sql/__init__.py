"""Named SQL blocks from ``queries.sql``, loaded once."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_NAME_RE = re.compile(r"^-- name: (?P<name>\w+)\s*$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """Split ``-- name: x`` blocks; each block's SQL runs until the next name (comments kept)."""
    matches = list(_NAME_RE.finditer(text))
    queries: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip()
        name = match["name"]
        if name in queries:
            raise ValueError(f"duplicate query name {name!r}")
        queries[name] = body
    return queries


@cache
def queries() -> dict[str, str]:
    text = resources.files(__package__).joinpath("queries.sql").read_text(encoding="utf-8")
    return parse_queries(text)


def query(name: str) -> str:
    return queries()[name]
