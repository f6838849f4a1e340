"""The named SQL: every block is named and described, every name the code uses exists, and no
module builds SQL by string formatting. (Each query is PREPAREd against the real Postgres in
``tests/integration/test_store_postgres.py``.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import chronos
from chronos.store.postgres.sql import parse_queries, queries, sql_files

PACKAGE = Path(chronos.__file__).parent
SQL_TEXT = "\n".join(sql_files().values())
NAME_LINE = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def test_queries_are_loaded_by_name() -> None:
    names = NAME_LINE.findall(SQL_TEXT)
    assert names, "no named queries"
    assert len(names) == len(set(names)), "duplicate query names"
    assert sorted(queries()) == sorted(names)
    for name in ("enqueue_batch", "claim_due", "delete_fired", "find_stuck", "reset_stuck"):
        assert name in queries()


def test_the_sql_is_split_by_subject() -> None:
    """One file a subject, each of a few hundred lines at most."""
    files = sql_files()
    assert set(files) >= {"intake.sql", "firing.sql", "recovery.sql", "leadership.sql", "flow.sql"}
    for name, text in files.items():
        assert NAME_LINE.search(text), f"{name} names no query"
        assert len(text.splitlines()) <= 500, f"{name} is past 500 lines"


def test_every_query_has_a_one_line_description() -> None:
    lines = SQL_TEXT.splitlines()
    for index, line in enumerate(lines):
        match = NAME_LINE.match(line)
        if match is None:
            continue
        description = lines[index + 1] if index + 1 < len(lines) else ""
        assert description.startswith("-- "), f"{match[1]}: no description line"
        assert len(description[3:].strip()) >= 10, f"{match[1]}: description too short"


def test_every_query_has_a_statement_and_only_named_placeholders() -> None:
    for name, text in queries().items():
        statement = "\n".join(
            line for line in text.splitlines() if not line.lstrip().startswith("--")
        ).strip()
        assert statement, f"{name} is empty"
        assert re.match(r"(WITH|SELECT|INSERT|UPDATE|DELETE|VACUUM)\b", statement, re.I), name
        # psycopg placeholders are %(name)s; a stray % would break or be a positional one.
        without_named = re.sub(r"%\(\w+\)[sb]", "", statement)
        assert "%" not in without_named, f"{name}: positional or stray % placeholder"
        assert not re.search(r"\{\w*\}", statement), f"{name}: str.format field"


def test_every_query_is_one_statement() -> None:
    """A ``;`` ends a query's text, nowhere else (outside comments and string literals): a
    second statement after it would be sent with the first and refused at run time."""
    for name, text in queries().items():
        code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
        code = re.sub(r"'[^']*'", "''", code).strip()
        assert code.count(";") <= 1 and (";" not in code or code.endswith(";")), (
            f"{name}: more than one statement"
        )


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        parse_queries("-- name: a\n-- x\nSELECT 1;\n-- name: a\n-- y\nSELECT 2;\n")


def _string_arguments(tree: ast.AST, function: str) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        first = node.args[0]
        if called == function and isinstance(first, ast.Constant) and isinstance(first.value, str):
            found.append(first.value)
    return found


def test_every_query_name_used_by_the_code_exists() -> None:
    used: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for function in ("query", "_execute", "_execute_tuples", "_execute_one"):
            used.update(_string_arguments(tree, function))
    assert used, "no query names found: has the store changed how it names queries?"
    missing = used - set(queries())
    assert not missing, f"the code uses unknown queries: {sorted(missing)}"


# --------------------------------------------------------------------- no SQL by formatting

SQL_PATTERNS = [
    re.compile(r"\bselect\b[\s\S]*\bfrom\b", re.I),
    re.compile(r"\binsert\s+into\b", re.I),
    re.compile(r"\bupdate\s+\w+\s+set\b", re.I),
    re.compile(r"\bdelete\s+from\b", re.I),
    re.compile(r"\b(create|drop|alter|truncate)\s+(table|database|index|schema|role|user)\b", re.I),
    re.compile(r"\b(WHERE|RETURNING|VALUES|ORDER BY|GROUP BY|LIMIT|JOIN)\b"),  # SQL casing
]


def _looks_like_sql(text: str) -> bool:
    return any(p.search(text) for p in SQL_PATTERNS)


def _literal_text(node: ast.AST) -> str | None:
    """The literal text of a str constant or an f-string (its constant parts)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return " ".join(
            v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        )
    return None


def sql_formatting(source: str) -> list[tuple[int, str]]:
    """(line, how) of every place that formats a string that looks like SQL."""
    problems: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr) and any(
            isinstance(v, ast.FormattedValue) for v in node.values
        ):
            text = _literal_text(node)
            if text and _looks_like_sql(text):
                problems.append((node.lineno, "f-string"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod | ast.Add):
            for side in (node.left, node.right):
                text = _literal_text(side)
                if text and _looks_like_sql(text):
                    how = "% formatting" if isinstance(node.op, ast.Mod) else "concatenation"
                    problems.append((node.lineno, how))
                    break
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("format", "format_map", "join")
        ):
            text = _literal_text(node.func.value)
            if text is not None and (
                _looks_like_sql(text)
                or any(_looks_like_sql(_literal_text(a) or "") for a in node.args)
            ):
                problems.append((node.lineno, f"str.{node.func.attr}"))
    return problems


@pytest.mark.parametrize(
    "snippet",
    [
        'q = f"SELECT * FROM chronos_messages WHERE id = {message_id}"',
        "q = \"DELETE FROM chronos_messages WHERE id = '%s'\" % message_id",
        'q = "UPDATE chronos_messages SET readied_at = {}".format(t)',
        'q = "SELECT id FROM chronos_messages WHERE id = " + message_id',
        'q = f"select id from t where x = {x}"',
        "q = f'''\n  INSERT INTO chronos_messages (id)\n  VALUES ({v})\n'''",
        'q = " AND ".join(["x = 1", "y = 2"]) + " ORDER BY x"',
    ],
)
def test_the_detector_finds_sql_built_by_formatting(snippet: str) -> None:
    assert sql_formatting(snippet), snippet


@pytest.mark.parametrize(
    "snippet",
    [
        'conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))',
        'cur.execute(query("claim_due"), {"node_id": node_id})',
        'raise StoreError(f"{name} failed: {exc}")',
        'log.warning("delete of %d fired rows failed: %s", n, exc)',
        'raise ConfigError(f"topic {topic!r} ({env}) does not exist on the broker")',
    ],
)
def test_the_detector_accepts_safe_code(snippet: str) -> None:
    assert sql_formatting(snippet) == []


def test_no_module_builds_sql_by_string_formatting() -> None:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, how in sql_formatting(path.read_text(encoding="utf-8")):
            problems.append(f"{path.relative_to(PACKAGE.parent)}:{line}: SQL built by {how}")
    assert not problems, "\n".join(problems)


def test_only_the_store_runs_the_named_queries() -> None:
    """The loops share the Store interface; SQL is run by the store module alone (and by the
    move of a partition between shards, an operator's command over two databases at once)."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).as_posix() in (
            "store/postgres/store.py",
            "store/postgres/session.py",
            "store/postgres/sql/__init__.py",
            "store/postgres/moves.py",  # a partition's move: two shards' transactions and COPY
        ):
            continue
        text = path.read_text(encoding="utf-8")
        assert "from chronos.store.postgres.sql import" not in text, f"{path.name} runs SQL itself"
