"""Scenario 12 — hostile content: SQL-injection strings in ids, keys, values, header names and
header values, through a real node process; and a static check that no SQL is built by string
formatting anywhere in Chronos or its migrations.

Pass (runtime): messages due in 1-2 s come out byte-exact (key, value, headers in order, repeats
included); messages due in 10 minutes are stored byte-exact (id, key, value, headers read back
from the table); a canary table and the queue table survive; lost 0, no duplicate, none early.

Pass (static): no ``execute``-like call, ``text()`` or ``sql.SQL()`` gets an f-string, a
``%``-formatted, concatenated or ``.format()``-ed string; no f-string, ``%`` or ``.format()``
builds text that looks like SQL; the named SQL has only named ``%(name)s`` placeholders.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import chronos
from chronos.protocol import decode_headers
from chronos.store.postgres.sql import queries
from tests.fault.bounds import ON_TIME_MS
from tests.support import Topics
from tests.support.checker import (
    Outgoing,
    ScenarioResult,
    expectations,
    record_result,
    scheduled,
    send,
)
from tests.support.cluster import Cluster

REPO = Path(chronos.__file__).resolve().parents[1]

INJECTIONS = [
    "'; DROP TABLE chronos_messages; --",
    "'; DROP TABLE canary; --",
    '"; DROP TABLE canary; --',
    "' OR '1'='1",
    "Robert'); DELETE FROM chronos_messages WHERE ('1'='1",
    "%(node_id)s",
    "%s%s%s%(limit)s",
    "%%",
    "{}{0}{id}",
    "$1 $$; DROP TABLE canary; $$",
    "\\'; DROP TABLE canary; --",
    "E'\\x27'; DROP TABLE canary; --",
    "\u02bc; DROP TABLE canary; --",
    "\uff07 OR 1=1 --",
    '"}]; DROP TABLE canary; --',
    '{"i": "x", "d": "2000-01-01"}',
    '\\u0000\\\\"',
    "/* */ UNION SELECT * FROM pg_shadow --",
    "\n;\r\nCOMMIT; DROP TABLE canary;",
    "\u202e canary",  # a right-to-left override
]


def hostile(i: int, text: str, deadline: datetime) -> Outgoing:
    raw = text.encode("utf-8")
    return scheduled(
        deadline,
        message_id=f"{i:02d}{text}"[:128],
        key=raw,
        value=b"\x00" + raw + b"\x00\xff",
        extra_headers=[
            (text, raw),
            ("x-sql", raw),
            (text, None),
            ("x-sql", b"'" + raw),
        ],
    )


@pytest.mark.integration
def test_injection_strings_are_stored_and_relayed_byte_exact(
    make_cluster: Callable[..., Cluster], kafka_bootstrap: str, topics: Topics
) -> None:
    cluster = make_cluster()
    with cluster.table.connect() as conn:
        conn.execute("CREATE TABLE canary (x int)")
        conn.execute("INSERT INTO canary VALUES (1)")
    cluster.start()
    cluster.wait_ready()
    now = datetime.now(UTC)
    soon = [hostile(i, t, now + timedelta(seconds=1 + i / 20)) for i, t in enumerate(INJECTIONS)]
    later = [hostile(50 + i, t, now + timedelta(minutes=10)) for i, t in enumerate(INJECTIONS)]
    send(kafka_bootstrap, topics.input, soon + later)

    report = cluster.check(expectations(soon), timeout=30, quiet=1.5)
    record_result(
        ScenarioResult.of(
            "12-hostile-content",
            "SQL-injection strings in id, key, value, header names and values",
            report,
            None,
            stored=len(later),
        )
    )
    assert report.lost == [] and report.misrouted == [], report.summary()
    assert report.duplicated == {} and report.early == {}, report.summary()
    assert report.late.max <= ON_TIME_MS, report.summary()
    by_track = {o.track: o for o in report.observations}
    for message in soon:
        out = by_track[message.track]
        assert (out.key, out.value) == (message.key, message.value), message.track
        assert out.headers == message.relayed_headers, message.track

    stored = {
        row[0]: row[1:]
        for row in cluster.table.rows(
            "SELECT id, message_key, message_value, message_headers FROM chronos_messages"
        )
    }
    assert len(stored) == len(later)
    for message in later:
        message_id = dict(message.headers)["chronosMessageId"]
        assert message_id is not None
        key, value, headers = stored[message_id.decode()]
        assert (bytes(key), bytes(value)) == (message.key, message.value)
        assert decode_headers(headers) == message.relayed_headers
    assert cluster.table.scalar("SELECT x FROM canary") == 1


# ------------------------------------------------------------------------------------ static

SQL_LIKE = re.compile(
    r"\b(select\b.*\bfrom|insert\s+into|update\b.*\bset|delete\s+from|drop\s+(table|index)"
    r"|create\s+(table|index)|alter\s+table|truncate\b|where\b.*[=<>])",
    re.IGNORECASE | re.DOTALL,
)
EXECUTORS = {"execute", "executemany", "exec_driver_sql", "copy", "text", "SQL", "mogrify"}


def python_files() -> Iterator[Path]:
    for top in ("chronos", "migrations"):
        yield from sorted((REPO / top).rglob("*.py"))


def _literal_text(node: ast.AST) -> str:
    """The constant text inside a string-building expression."""
    return " ".join(
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    )


def _builds_string(node: ast.AST) -> bool:
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.FormattedValue) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        return any(
            isinstance(side, (ast.Constant, ast.JoinedStr)) and _literal_text(side)
            for side in (node.left, node.right)
        )
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
    ):
        return isinstance(node.func.value, (ast.Constant, ast.JoinedStr))
    return False


def formatted_sql(source: str, filename: str) -> list[str]:
    """Places in ``source`` where SQL is built by string formatting."""
    problems = []
    tree = ast.parse(source, filename)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in EXECUTORS and node.args and _builds_string(node.args[0]):
                problems.append(f"{filename}:{node.lineno}: {name}() of a formatted string")
        if _builds_string(node) and SQL_LIKE.search(_literal_text(node)):
            problems.append(
                f"{filename}:{getattr(node, 'lineno', 0)}: SQL built by string formatting"
            )
    return problems


def test_the_static_check_catches_formatted_sql() -> None:
    bad = [
        'cur.execute(f"SELECT * FROM t WHERE id = {x}")',
        'conn.execute("DELETE FROM t WHERE id = %s" % x)',
        'conn.execute("SELECT * FROM t WHERE id = " + x)',
        'q = "UPDATE t SET a = {}".format(x)',
        'q = f"INSERT INTO t VALUES ({x})"',
        "op.execute(sa.text(f'DROP TABLE {name}'))",
    ]
    for line in bad:
        assert formatted_sql(line, "<bad>"), line
    good = [
        "cur.execute(query(name), params)",
        'conn.execute("SELECT 1")',
        'log.info(f"selected {n} rows from the queue")',
        'raise ValueError(f"cannot update {x}")',
        'sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))',
    ]
    for line in good:
        assert not formatted_sql(line, "<good>"), line


def test_no_sql_is_built_by_string_formatting() -> None:
    files = list(python_files())
    assert len(files) > 10
    problems = [p for f in files for p in formatted_sql(f.read_text(), str(f.relative_to(REPO)))]
    assert problems == []


def test_named_queries_use_only_named_placeholders() -> None:
    for name, text in queries().items():
        code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
        assert not re.search(r"%s|%\d|\{\w*\}", code), f"{name}: positional or format placeholder"
        stray = re.sub(r"%\(\w+\)[sb]", "", code)
        assert "%" not in stray.replace("%%", ""), f"{name}: stray % in {stray!r}"
