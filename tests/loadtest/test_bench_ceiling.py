"""The ceiling drives the node's own store (no SQL of its own) on real Postgres, in a scratch
schema that leaves the live table alone."""

from __future__ import annotations

from collections import Counter
from typing import Any

import psycopg
import pytest

from chronos.store import PostgresStore
from loadtest.bench import ceiling

pytestmark = pytest.mark.integration


def test_ceiling_runs_the_stores_statements_in_a_scratch_schema(
    migrated_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = migrated_database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO chronos_messages (id, deadline) VALUES ('live', now() + interval '1 s')"
        )
    calls: Counter[str] = Counter()
    for name in ("enqueue", "claim", "delete_fired"):
        real = getattr(PostgresStore, name)

        def spy(
            self: PostgresStore, *args: Any, _real: Any = real, _name: str = name, **kw: Any
        ) -> Any:
            calls[_name] += 1
            return _real(self, *args, **kw)

        monkeypatch.setattr(PostgresStore, name, spy)

    result = ceiling.run_ceiling(
        url, seconds=1.0, warmup=0.5, batch=500, environ={"CHRONOS_LOOKAHEAD_MS": "0"}
    )

    assert result.statements == "store" and result.batch == 500
    assert result.inserted > 0 and result.deleted > 0 and result.ceiling_msg_per_s > 0
    assert calls["enqueue"] > 0 and calls["claim"] > 0 and calls["delete_fired"] > 0
    with psycopg.connect(url, autocommit=True) as conn:
        # The live row is untouched (due meanwhile, never claimed) and the scratch schema gone.
        rows = conn.execute("SELECT id, readied_at FROM chronos_messages").fetchall()
        assert rows == [("live", None)]
        schema = conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (ceiling.SCHEMA,)
        ).fetchone()
        assert schema is None


def test_scratch_copies_the_storage_parameters(migrated_database_url: str) -> None:
    url = migrated_database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE chronos_messages SET (fillfactor = 70)")
        ceiling.create_scratch(conn)
        try:
            options = conn.execute(
                "SELECT reloptions FROM pg_class WHERE oid = to_regclass(%s)",
                (f"{ceiling.SCHEMA}.chronos_messages",),
            ).fetchone()
            indexes = conn.execute(
                "SELECT count(*) FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
                (ceiling.SCHEMA, "chronos_messages"),
            ).fetchone()
            live = conn.execute(
                "SELECT count(*) FROM pg_indexes WHERE tablename = 'chronos_messages' "
                "AND schemaname <> %s",
                (ceiling.SCHEMA,),
            ).fetchone()
        finally:
            ceiling.drop_scratch(url)
    assert options is not None and "fillfactor=70" in options[0]
    assert indexes is not None and live is not None and indexes[0] == live[0] > 1
