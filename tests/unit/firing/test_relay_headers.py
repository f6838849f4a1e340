"""The opt-in headers a consumer deduplicates with (CHRONOS_RELAY_ID_HEADER,
CHRONOS_RELAY_DEADLINE_HEADER): off by default, so the output stays byte-exact."""

from __future__ import annotations

from tests.support.store_contract import msg
from tests.unit.helpers import Firing


def test_the_id_and_scheduled_instant_are_relayed_only_when_asked() -> None:
    """Off by default (byte-exact output); on, the two headers come after the message's own."""
    from datetime import UTC, datetime

    f = Firing.create(relay_id_header="x-id", relay_deadline_header="x-scheduled-for")
    deadline = f.at(100)
    f.store.enqueue([msg("m-1", deadline, key=b"k", value=b"v", headers=[("a", b"1")])], 0)
    f.run_for(200, step_ms=10)
    (record,) = f.publisher.records
    assert record.headers[0] == ("a", b"1")
    relayed = dict(record.headers[1:])
    assert relayed["x-id"] == b"m-1"
    stamp = relayed["x-scheduled-for"]
    assert stamp is not None
    assert datetime.fromisoformat(stamp.decode().replace("Z", "+00:00")) == deadline.astimezone(
        UTC
    ).replace(microsecond=deadline.microsecond // 1000 * 1000)


def test_a_record_published_on_arrival_carries_the_same_headers() -> None:
    from tests.unit.intake.helpers import Intake

    t = Intake(relay_id_header="x-id")
    assert t.process(t.record("late", -1000, extra=[("h", b"1")]))
    (record,) = t.publisher.records
    # The id alone does not name an occurrence of a series: the instant comes with it.
    assert [name for name, _ in record.headers] == ["h", "x-id", "chronosScheduledFor"]
    assert record.headers[:2] == [("h", b"1"), ("x-id", b"late")]


def test_two_relay_headers_of_one_name_stop_start_up() -> None:
    import pytest

    from chronos.errors import ConfigError
    from tests.unit.helpers import settings

    with pytest.raises(ConfigError, match="CHRONOS_RELAY_ID_HEADER"):
        settings(relay_id_header="x", relay_deadline_header="x")
