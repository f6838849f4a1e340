"""Named SQL blocks from ``queries.sql``, loaded once.

A query is typed ``LiteralString``: the text is the package's own file, never built from data
(parameters are always bound), so the driver's checks of literal SQL hold for every statement.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import LiteralString, cast

_NAME_RE = re.compile(r"^-- name: (?P<name>\w+)\s*$", re.MULTILINE)


def parse_queries(text: LiteralString) -> dict[str, LiteralString]:
    """Split ``-- name: x`` blocks; each block's SQL runs until the next name (comments kept)."""
    matches = list(_NAME_RE.finditer(text))
    queries: dict[str, LiteralString] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip()
        name = match["name"]
        if name in queries:
            raise ValueError(f"duplicate query name {name!r}")
        queries[name] = body
    return queries


@cache
def queries() -> dict[str, LiteralString]:
    text = resources.files(__package__).joinpath("queries.sql").read_text(encoding="utf-8")
    # The one cast: the file ships with the package and no part of it comes from data, so its
    # text is as literal as a constant in the code. (mypy reads LiteralString as str: to it the
    # cast is redundant; checkers that enforce LiteralString need it.)
    return parse_queries(cast(LiteralString, text))  # type: ignore[redundant-cast]


def query(name: str) -> LiteralString:
    return queries()[name]
