"""``chronos check`` against the real Postgres and broker: every line it reports, passing and
failing, and the exit status."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from chronos import cli
from chronos.store import migrate
from tests.integration.test_least_privilege import NODE_GRANTS, as_role
from tests.support import Topics
from tests.support.databases import DatabaseFactory

pytestmark = pytest.mark.integration


def check(
    capsys: pytest.CaptureFixture[str], database_url: str, bootstrap: str, topics: Topics
) -> tuple[int, dict[str, dict[str, Any]]]:
    code = cli.main(
        [
            "check",
            "--json",
            "--database-url",
            database_url,
            "--kafka-bootstrap-servers",
            bootstrap,
            "--input-topic",
            topics.input,
            "--output-topic",
            topics.output,
            "--dead-letter-topic",
            topics.dead_letter,
        ]
    )
    lines = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in lines}


def statuses(lines: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {name: c["status"] for name, c in lines.items()}


ALL = [
    "postgres",
    "schema",
    "grants",
    "kafka",
    "input topic",
    "output topic",
    "dead-letter topic",
    "consumer group",
]


def test_everything_passes_on_a_ready_installation(
    capsys: pytest.CaptureFixture[str],
    migrated_database_url: str,
    kafka_bootstrap: str,
    topics: Topics,
) -> None:
    code, lines = check(capsys, migrated_database_url, kafka_bootstrap, topics)
    assert statuses(lines) == dict.fromkeys(ALL, "ok"), lines
    assert code == 0
    assert "no TLS" in lines["postgres"]["detail"]
    assert "PLAINTEXT" in lines["kafka"]["detail"]


def test_text_output_is_one_line_per_check(
    capsys: pytest.CaptureFixture[str],
    migrated_database_url: str,
    kafka_bootstrap: str,
    topics: Topics,
) -> None:
    code = cli.main(
        [
            "check",
            "--database-url",
            migrated_database_url,
            "--kafka-bootstrap-servers",
            kafka_bootstrap,
            "--input-topic",
            topics.input,
            "--output-topic",
            topics.output,
            "--dead-letter-topic",
            topics.dead_letter,
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and len(out) == len(ALL)
    assert all(line.startswith("ok ") for line in out), out


def test_an_unmigrated_database_fails_the_schema_line(
    capsys: pytest.CaptureFixture[str], database_url: str, kafka_bootstrap: str, topics: Topics
) -> None:
    code, lines = check(capsys, database_url, kafka_bootstrap, topics)
    assert code == 1
    assert lines["postgres"]["status"] == "ok"
    assert lines["schema"]["status"] == "FAIL" and "chronos migrate" in lines["schema"]["detail"]
    assert lines["grants"]["status"] == "skip"
    migrate.upgrade(database_url, "0005")
    code, lines = check(capsys, database_url, kafka_bootstrap, topics)
    assert lines["schema"]["status"] == "FAIL" and "0005" in lines["schema"]["detail"]


@pytest.fixture
def bare_role(
    database_factory: DatabaseFactory, postgres_server: str
) -> Iterator[tuple[str, str, str]]:
    """(owner URL, a role's URL, the role) on a migrated database; the role may only log in."""
    owner_url = database_factory.create_migrated()
    role = f"chronos_check_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        yield owner_url, as_role(owner_url, role), role
    finally:
        database_factory.drop(owner_url)
        with psycopg.connect(postgres_server, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_a_role_without_the_documented_grants_fails_the_grants_line(
    capsys: pytest.CaptureFixture[str],
    bare_role: tuple[str, str, str],
    kafka_bootstrap: str,
    topics: Topics,
) -> None:
    owner_url, role_url, role = bare_role
    code, lines = check(capsys, role_url, kafka_bootstrap, topics)
    assert code == 1
    assert (
        lines["grants"]["status"] == "FAIL"
        and "INSERT on chronos_messages" in lines["grants"]["detail"]
    )
    database = psycopg.conninfo.conninfo_to_dict(owner_url)["dbname"]
    with psycopg.connect(owner_url, autocommit=True) as conn:
        for grant in NODE_GRANTS:
            conn.execute(
                sql.SQL(grant).format(
                    database=sql.Identifier(str(database)), role=sql.Identifier(role)
                )
            )
        conn.execute(sql.SQL("GRANT SELECT ON alembic_version TO {}").format(sql.Identifier(role)))
    code, lines = check(capsys, role_url, kafka_bootstrap, topics)
    assert statuses(lines)["grants"] == "ok", lines["grants"]


def test_a_role_without_the_flow_control_grants_fails_the_grants_line(
    capsys: pytest.CaptureFixture[str],
    bare_role: tuple[str, str, str],
    kafka_bootstrap: str,
    topics: Topics,
) -> None:
    """The grants the docs listed before flow control (four tables): a node with them alone
    cannot read what is paused, so the check names the two tables it lacks."""
    owner_url, role_url, role = bare_role
    with psycopg.connect(owner_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON chronos_messages, chronos_nodes, "
                "chronos_cancels, chronos_tenants TO {}"
            ).format(sql.Identifier(role))
        )
    code, lines = check(capsys, role_url, kafka_bootstrap, topics)
    assert code == 1
    detail = lines["grants"]["detail"]
    assert lines["grants"]["status"] == "FAIL", detail
    assert "SELECT on chronos_pauses" in detail and "SELECT on chronos_limits" in detail, detail
    assert "chronos_messages" not in detail, detail


def test_postgres_away_fails_its_line_and_skips_what_needs_it(
    capsys: pytest.CaptureFixture[str], kafka_bootstrap: str, topics: Topics
) -> None:
    code, lines = check(capsys, "postgresql://chronos@127.0.0.1:1/chronos", kafka_bootstrap, topics)
    assert code == 1
    assert lines["postgres"]["status"] == "FAIL"
    assert "CHRONOS_DATABASE_URL" in lines["postgres"]["detail"]
    assert (lines["schema"]["status"], lines["grants"]["status"]) == ("skip", "skip")
    assert lines["kafka"]["status"] == "ok"


def test_a_missing_topic_fails_its_line(
    capsys: pytest.CaptureFixture[str],
    migrated_database_url: str,
    kafka_bootstrap: str,
    topics: Topics,
) -> None:
    missing = Topics(
        topics.input, f"{topics.output}-missing-{uuid.uuid4().hex[:6]}", topics.dead_letter
    )
    code, lines = check(capsys, migrated_database_url, kafka_bootstrap, missing)
    assert code == 1
    assert lines["output topic"]["status"] == "FAIL"
    assert "CHRONOS_OUTPUT_TOPIC" in lines["output topic"]["detail"]
    assert lines["input topic"]["status"] == "ok"


def test_an_unreachable_broker_fails_its_line_and_skips_the_topics(
    capsys: pytest.CaptureFixture[str], migrated_database_url: str, topics: Topics
) -> None:
    code, lines = check(capsys, migrated_database_url, "127.0.0.1:1", topics)
    assert code == 1
    assert lines["kafka"]["status"] == "FAIL"
    assert "CHRONOS_KAFKA_BOOTSTRAP_SERVERS" in lines["kafka"]["detail"]
    assert {lines[n]["status"] for n in ALL[4:]} == {"skip"}
    assert lines["schema"]["status"] == "ok"


@pytest.mark.parametrize("as_json", [False, True])
def test_a_password_libpq_echoes_is_redacted(
    capsys: pytest.CaptureFixture[str], kafka_bootstrap: str, topics: Topics, as_json: bool
) -> None:
    """libpq echoes a password it cannot decode ('invalid percent-encoded token'): what ``check``
    prints goes through the node's log redaction, in text and JSON."""
    url = "postgresql://u:s3cr%zzet@127.0.0.1:1/db"
    args = ["check", "--database-url", url, "--kafka-bootstrap-servers", kafka_bootstrap]
    args += ["--input-topic", topics.input, "--output-topic", topics.output]
    args += ["--dead-letter-topic", topics.dead_letter]
    code = cli.main([*args, "--json"] if as_json else args)
    printed = capsys.readouterr()
    assert code == 1
    assert "percent-encoded" in printed.out  # the reason is still said
    assert "s3cr" not in printed.out + printed.err
    assert "***" in printed.out
