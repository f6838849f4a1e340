"""The history of ended messages end to end: a message scheduled through the input topic fires on
a live node (a real ``chronos run`` process on the embedded Postgres and broker), and then
``chronos admin get ID`` (the real command line, in a subprocess) answers where and how late it
fired, and the console (a real headless browser) shows its life and the last hour's summary."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.error
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Producer

from chronos.protocol import DEADLINE_HEADER, MESSAGE_ID_HEADER, format_deadline
from chronos.protocol.names import TENANT_HEADER
from tests.e2e.console_support import ARTIFACTS, TOKEN, Live, Page
from tests.support.polling import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]


def fire_soon(live: Live, message_id: str, tenant: str) -> None:
    """Schedule ``message_id`` a second from now and wait until the node's history has it."""
    producer = Producer({"bootstrap.servers": live.bootstrap})
    deadline = datetime.now(UTC) + timedelta(seconds=1)
    producer.produce(
        live.cluster.topics.input,
        key=b"k",
        value=b"v",
        headers=[
            (MESSAGE_ID_HEADER, message_id.encode()),
            (DEADLINE_HEADER, format_deadline(deadline).encode()),
            (TENANT_HEADER, tenant.encode()),
        ],
    )
    assert producer.flush(30) == 0

    def ended() -> bool:
        try:
            return bool(live.api("/messages/" + message_id).get("ended"))
        except urllib.error.HTTPError:
            return False

    assert eventually(ended, timeout=30, every=0.2), f"{message_id} never showed as fired"


def test_admin_get_of_a_fired_message_says_where_and_how_late_it_fired(live: Live) -> None:
    message_id = f"order-{uuid.uuid4().hex[:8]}"
    fire_soon(live, message_id, "acme")
    result = subprocess.run(
        [sys.executable, "-m", "chronos", "admin", "get", message_id],
        env={"CHRONOS_ADMIN_URL": live.url, "CHRONOS_ADMIN_TOKEN": TOKEN, "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip().splitlines()[0]
    output = re.escape(live.cluster.topics.output)
    assert re.fullmatch(
        rf"fired \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{{3}}Z to {output}\[\d+\]@\d+, "
        rf"-?\d+ ms (after|before) its deadline, by node {live.node.settings.node_id}",
        line,
    ), line
    record: dict[str, Any] = live.api("/messages/" + message_id)
    assert record["tenant"] == "acme" and record["attempt"] == 1
    assert record["lateness_ms"] < 1_000


def test_the_console_shows_a_fired_message_life_and_the_summary(live: Live, browser: Any) -> None:
    message_id = f"shown-{uuid.uuid4().hex[:8]}"
    fire_soon(live, message_id, "beta")
    page = Page(browser, live)
    page.type("lookup-id", message_id)
    page.click("lookup")
    page.until_text("message-summary", f"{message_id}: fired ")
    life = page.rows("message-life")
    assert len(life) == 2 and life[1][0] == "fired"  # the header row, then its one record
    assert life[1][3].startswith(live.cluster.topics.output + "[")
    page.until(lambda: any(r[0] == "beta" and r[1] == "1" for r in page.rows("history-summary")))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "console-history.png"))
