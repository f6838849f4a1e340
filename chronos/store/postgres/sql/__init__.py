"""Named SQL blocks from the ``*.sql`` files beside this module (one a subject: intake, firing,
recovery, leadership, flow, admin, find, session), loaded once; a name is unique across them.

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


def sql_files() -> dict[str, str]:
    """Each ``*.sql`` file of the package by name, with its text."""
    package = resources.files(__package__)
    return {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in sorted(package.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".sql")
    }


@cache
def queries() -> dict[str, LiteralString]:
    merged: dict[str, LiteralString] = {}
    for name, text in sql_files().items():
        # The one cast: the files ship with the package and no part of them comes from data, so
        # their text is as literal as a constant in the code. (mypy reads LiteralString as str:
        # to it the cast is redundant; checkers that enforce LiteralString need it.)
        for query_name, body in parse_queries(cast(LiteralString, text)).items():  # type: ignore[redundant-cast]
            if query_name in merged:
                raise ValueError(f"duplicate query name {query_name!r} ({name})")
            merged[query_name] = body
    return merged


def query(name: str) -> LiteralString:
    return queries()[name]
