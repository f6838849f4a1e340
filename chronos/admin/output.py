"""The admin command line's plain-text output: tables and key-value lists, every cell escaped
(ids, tenants, header names and errors are producer-chosen text)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chronos.observability.logs import escape


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A plain text table: one header line, one line per row, columns padded."""
    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.1f}"
    # Ids, tenants, header names and errors are producer-chosen text: a newline or a terminal
    # escape in one must not forge a row or reach the terminal raw.
    return escape(str(value))


def pairs(mapping: Mapping[str, Any]) -> str:
    width = max((len(k) for k in mapping), default=0)
    return "\n".join(f"{escape(k).ljust(width)}  {cell(v)}" for k, v in mapping.items())
