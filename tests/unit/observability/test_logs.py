"""Log formats: producer-chosen text (message ids) can never forge or break a log line."""

from __future__ import annotations

import io
import json
import logging
import os
from typing import Any

import pytest

from chronos.observability import logs

HOSTILE = "id-1\n2026-01-01 00:00:00,000 ERROR   chronos [x] forged\r\x1b[31mred\u2028"


def _emit(fmt: str, monkeypatch: pytest.MonkeyPatch, node: str | None = None) -> str:
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.configure("INFO", fmt, node=node)
        logging.getLogger("chronos.firing.loop").warning(
            "fired message %s was no longer claimed", HOSTILE, extra={"event": "fenced_delete"}
        )
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    return stream.getvalue()


def test_text_log_escapes_control_characters_in_message_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = _emit("text", monkeypatch)
    assert out.endswith("\n") and out.count("\n") == 1, out  # one record, one line
    assert "\x1b" not in out and "\r" not in out and "\u2028" not in out
    assert "id-1\\n2026-01-01" in out and "\\x1b[31mred\\u2028" in out


def test_json_log_keeps_the_exact_id(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _emit("json", monkeypatch)
    assert out.count("\n") == 1
    assert HOSTILE in json.loads(out)["message"]


def test_text_log_keeps_a_traceback_readable(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.configure("INFO", "text")
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("chronos").exception("loop died")
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    assert "Traceback (most recent call last):\n" in stream.getvalue()


def test_the_intake_process_logs_carry_the_node_id(monkeypatch: pytest.MonkeyPatch) -> None:
    assert json.loads(_emit("json", monkeypatch, node="node-7"))["node"] == "node-7"
    assert "node=node-7]" in _emit("text", monkeypatch, node="node-7")
    assert "node" not in json.loads(_emit("json", monkeypatch))


def test_the_node_process_logs_carry_the_node_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """``chronos run`` logs like its intake process: every record names the node."""
    from chronos import cli
    from chronos.node import supervisor as node

    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    for key in [k for k in os.environ if k.startswith("CHRONOS_")]:
        monkeypatch.delenv(key)

    def run_node(config: Any) -> int:
        logging.getLogger("chronos.node.supervisor").info(
            "started", extra={"event": "node_started"}
        )
        return 0

    monkeypatch.setattr(node, "run_node", run_node)
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    node_id = "5f0c7a40-0000-4000-8000-000000000007"
    try:
        argv = ["run", "--database-url", "postgresql://u@h/db", "--log-format", "json"]
        assert cli.main([*argv, "--node-id", node_id]) == 0
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    assert json.loads(stream.getvalue().splitlines()[-1])["node"] == node_id
