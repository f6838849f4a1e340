"""Valid and invalid values for every setting, derived from its declaration."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from chronos.config.settings import OPTIONS, Option

DB = "postgresql://chronos:s3cret@db.example:5432/chronos"


def alternative(option: Option) -> tuple[str, Any]:
    """A valid value other than the default, as text and as parsed."""
    if option.choices is not None:
        text = next(c for c in option.choices if c != option.parse(str(option.default)))
        return text, text
    if option.name == "node_id":
        text = str(uuid.uuid4())
        return text, text
    if option.name in ("database_url", "migration_database_url"):
        return DB, DB
    if isinstance(option.default, timedelta):  # a duration: any other one, in its grammar
        return "3h", option.parse("3h")
    if isinstance(option.default, bool):  # a yes or no: the other one
        return str(not option.default).lower(), not option.default
    if isinstance(option.default, int):
        text = str(option.default + 7)
        return text, option.default + 7
    text = f"{option.default}-x" if option.default else "alt-value"
    return text, option.parse(text)


BAD_CANDIDATES = ("abc", "-1", "1.5", "bad topic!", "", "65536", "not-a-level")


def bad_value(option: Option) -> str | None:
    """A value the option must refuse, or None for free-form options (any string is valid)."""
    for candidate in BAD_CANDIDATES:
        try:
            parsed = option.parse(candidate)
        except ValueError:
            return candidate
        if option.choices is not None and parsed not in option.choices:
            return candidate
    return None


VALIDATED = [o for o in OPTIONS if bad_value(o) is not None]
