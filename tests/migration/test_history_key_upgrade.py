"""Migration 0014 (chronos_history.message_key and its index) on a history with days and records:
the index is built partition by partition and valid once each has its own, the previous release's
inserts go on beside it (no key), a day created afterwards gets the index, an interrupted build
runs again and finishes, and the downgrade keeps the records."""

from __future__ import annotations

import psycopg
import pytest

from chronos.store import migrate
from tests.migration.helpers import attached_indexes, history_days

pytestmark = pytest.mark.integration

INDEX = "chronos_history_key_idx"

# A history insert of the release before 0014 (its cancel_message's): no message_key column.
OLD_HISTORY_INSERT = (
    "INSERT INTO chronos_history (id, tenant, outcome, deadline, reason, ended_by, recurring) "
    "VALUES (%s, '', 'cancelled', now(), 'admin', 'alice', false)"
)


def _indexes(url: str) -> dict[str, tuple[bool, str | None]]:
    """Each partition of the history: whether it has an index attached to the parent's key
    index, and that index's validity; and the parent's own (``chronos_history``)."""
    return {
        name: (valid is not None, None if valid is None else str(valid))
        for name, valid in attached_indexes(url, INDEX).items()
    }


def _all_valid(url: str) -> bool:
    return all(attached and valid == "True" for attached, valid in _indexes(url).values())


def test_migration_0014_indexes_every_day_and_the_previous_release_writes_beside_it(
    database_url: str,
) -> None:
    migrate.upgrade(database_url, "0013")
    history_days(database_url, 0, 3)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(OLD_HISTORY_INSERT, ("before",))
    migrate.upgrade(database_url, "0014")
    indexes = _indexes(database_url)
    assert len(indexes) == 4 and _all_valid(database_url), indexes
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(OLD_HISTORY_INSERT, ("beside",))  # a node of the previous release
        conn.execute(
            "INSERT INTO chronos_history (id, outcome, deadline, message_key) "
            "VALUES ('keyed', 'fired', now(), 'order-1')"
        )
        found = conn.execute("SELECT id, message_key FROM chronos_history").fetchall()
        keys: dict[str, bytes | None] = dict(found)
    assert keys == {"before": None, "beside": None, "keyed": b"order-1"}
    history_days(database_url, 3, 1)  # a day the leader creates after the upgrade
    assert len(_indexes(database_url)) == 5 and _all_valid(database_url)
    migrate.upgrade(database_url, "0015")  # the next revision keeps it (0016 replaces it)
    assert _all_valid(database_url)
    migrate.downgrade(database_url, "0013")
    with psycopg.connect(database_url, autocommit=True) as conn:
        (gone,) = conn.execute("SELECT to_regclass(%s) IS NULL", (INDEX,)).fetchone() or (False,)
        columns = conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE column_name = 'message_key' "
            "AND table_name LIKE 'chronos_history%'"
        ).fetchone()
        ids = {r[0] for r in conn.execute("SELECT id FROM chronos_history").fetchall()}
        conn.execute(OLD_HISTORY_INSERT, ("after",))
    assert gone and columns == (0,)
    assert ids == {"before", "beside", "keyed"}
    migrate.upgrade(database_url, "0015")
    assert _all_valid(database_url)


def test_migration_0014_interrupted_in_its_builds_runs_again_and_finishes(
    database_url: str,
) -> None:
    migrate.upgrade(database_url, "0014")
    history_days(database_url, 0, 3)
    today, tomorrow, after = sorted(n for n in _indexes(database_url) if n != "chronos_history")
    columns = "substring(message_key from 1 for 64), outcome, deadline, id"
    # What an interruption leaves: the parent's index (invalid while a day lacks its own), one
    # day's build cut short (INVALID: here an expression that fails on today's one record), one
    # day's index built but not attached, one day not begun; the revision not recorded.
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"DROP INDEX {INDEX}")
        conn.execute(f"CREATE INDEX {INDEX} ON ONLY chronos_history ({columns})")
        conn.execute(OLD_HISTORY_INSERT, ("today",))
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute(
                f"CREATE INDEX CONCURRENTLY {today}_key_idx ON {today} ({columns}, (1 / 0))"
            )
        conn.execute(f"CREATE INDEX {tomorrow}_key_idx ON {tomorrow} ({columns})")
        conn.execute("UPDATE alembic_version SET version_num = '0013'")
    indexes = _indexes(database_url)
    assert indexes["chronos_history"] == (True, "False")
    assert not any(indexes[day][0] for day in (today, tomorrow, after)), indexes
    migrate.upgrade(database_url, "0014")  # the re-run
    assert _all_valid(database_url), _indexes(database_url)
    with psycopg.connect(database_url) as conn:
        broken = conn.execute(
            "SELECT count(*) FROM pg_index WHERE indrelid = %s::regclass "
            "AND (NOT indisvalid OR pg_get_indexdef(indexrelid) LIKE '%%(1 / 0)%%')",
            (today,),
        ).fetchone()
        (version,) = conn.execute("SELECT version_num FROM alembic_version").fetchone() or ("",)
    assert broken == (0,) and version == "0014"
