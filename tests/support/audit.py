"""Audit events checked against the schema the repository ships
(chronos/observability/audit.schema.json), with the jsonschema package of the test set."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import jsonschema

from chronos.observability.audit import schema

VALIDATOR = jsonschema.Draft202012Validator(schema())


def valid_events(values: Iterable[bytes | None]) -> list[dict[str, Any]]:
    """Each record value parsed and validated (an invalid one fails the test with its path)."""
    events = []
    for value in values:
        assert value is not None
        event = json.loads(value)
        VALIDATOR.validate(event)
        events.append(event)
    return events
