"""The console's operations panels in a real headless browser against one live node (real
Postgres and broker): the dead letters browsed by reason and replayed once each with the count
shown first, and flow control (pauses and rate limits, each change after a confirmation)."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

from tests.e2e.console_support import (
    ARTIFACTS,
    READ_TOKEN,
    Live,
    Page,
    ids_of,
)
from tests.support.dead_letters import write_dead_letters

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]


def test_dead_letters_browsed_by_reason_and_replayed_once_with_the_count_first(
    live: Live, browser: Any
) -> None:
    write_dead_letters(live.bootstrap, live.cluster.topics)
    page = Page(browser, live)
    page.type("dl-reason", "topic_not_allowed")
    page.click("dl-browse")
    page.until(lambda: [row[1] for row in page.rows("dl-list")] == ["0:0", "0:1"])
    rows = page.rows("dl-list")
    assert [row[1] for row in rows] == ["0:0", "0:1"]
    assert {(row[3], row[4], row[7]) for row in rows} == {("topic_not_allowed", "in/0/1", "no")}
    assert "'gone' is not allowed" in rows[0][5]
    assert rows[0][6] == "chronosMessageId, chronosDeadline, x, x"

    page.browser.execute_script("document.querySelector('#dl-list .dl-pick').click()")
    page.click("dl-replay-chosen")
    page.until_text("dl-confirm-text", "Replay 1 dead letter(s) selected")
    page.click("dl-confirm-no")  # backing out replays nothing
    assert not page.el("dl-confirm").is_displayed()
    page.click("dl-replay-chosen")
    page.until_text("dl-confirm-text", "Replay 1 dead letter(s) selected")
    page.click("dl-confirm-yes")
    page.until_text("dl-result", "replayed 1")
    page.until(lambda: [row[7] for row in page.rows("dl-list")] == ["yes", "no"])

    page.click("dl-replay-reason")  # the other one: the first is not replayed again
    page.until_text("dl-confirm-text", "Replay 1 dead letter(s) of reason topic_not_allowed")
    assert "1 already replayed" in page.text("dl-confirm-text")
    page.click("dl-confirm-yes")
    page.until_text("dl-result", "replayed 1 (1 already replayed)")
    page.until(lambda: [row[7] for row in page.rows("dl-list")] == ["yes", "yes"])
    assert page.shown(".dl-pick") >= 1  # the admin token sees the replay boxes
    # The node read the replayed records from its input topic like any other.
    assert live.cluster.table.wait(lambda t: {"t0", "t1"} <= t.ids(), timeout=30)

    reader = Page(browser, live, READ_TOKEN)  # reads, and sees no replay action
    reader.until_text("role", "read-only token")
    reader.until(lambda: len(reader.rows("dl-list")) >= 3)
    assert not reader.el("dl-bar").is_displayed()
    assert reader.shown(".dl-pick") == 0


def test_a_count_past_its_limit_is_shown_as_an_estimate(live: Live, browser: Any) -> None:
    # 30,000 rows of one tenant, past the exact count's 10,000: the console says "about".
    with psycopg.connect(live.cluster.database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO chronos_messages (id, deadline, message_key, message_value, tenant) "
            "SELECT 'many-' || g, now() + interval '2 hours' + g * interval '1 ms', 'k', 'v', "
            "'many' FROM generate_series(1, 30000) g"
        )
        conn.execute("ANALYZE chronos_messages")
    page = Page(browser, live)
    page.search(tenant="many")
    page.until_text("browse-count", "(an estimate)")
    shown = page.text("browse-count")
    assert shown.startswith("about ") and shown.endswith(" message(s) match (an estimate)")
    assert 20_000 <= int(shown.split()[1]) <= 40_000, shown
    with psycopg.connect(live.cluster.database_url, autocommit=True) as conn:
        conn.execute("DELETE FROM chronos_messages WHERE tenant = 'many'")


def test_flow_control_pauses_resumes_limits_and_clears_each_after_a_confirmation(
    live: Live, browser: Any
) -> None:
    from selenium.webdriver.support.select import Select

    tenant, topic = ids_of("flow", 1)[0], f"flow-topic-{uuid.uuid4().hex[:6]}"
    page = Page(browser, live)
    try:
        Select(page.el("flow-kind")).select_by_value("tenant")
        page.type("flow-name", tenant)
        page.click("flow-pause")
        page.until_text("flow-confirm-text", f"Pause tenant {tenant}?")
        page.click("flow-confirm-no")  # backing out changes nothing
        assert not page.el("flow-confirm").is_displayed()
        assert tenant not in live.flow("pauses")
        page.click("flow-pause")
        page.until_text("flow-confirm-text", f"Pause tenant {tenant}?")
        page.click("flow-confirm-yes")
        page.until_text("flow-result", f"paused tenant {tenant}")
        page.until(lambda: tenant in page.row_names("pauses"))
        paused = live.flow("pauses")[tenant]
        assert (paused["kind"], paused["paused_by"]) == ("tenant", "admin token from 127.0.0.1")

        Select(page.el("flow-kind")).select_by_value("topic")
        page.type("flow-name", topic)
        page.click("flow-pause")
        page.until_text("flow-confirm-text", f"Pause topic {topic}?")
        page.click("flow-confirm-yes")
        page.until(lambda: topic in page.row_names("pauses"))
        assert live.flow("pauses")[topic]["kind"] == "topic"

        page.row_button("pauses", tenant)  # resume the tenant from its row
        page.until_text("flow-confirm-text", f"Resume tenant {tenant}?")
        page.click("flow-confirm-yes")
        page.until_text("flow-result", f"resumed tenant {tenant}")
        page.until(lambda: tenant not in page.row_names("pauses"))
        assert set(live.flow("pauses")) & {tenant, topic} == {topic}  # the topic stays paused

        page.type("flow-per-second", "200")
        page.click("flow-limit")
        page.until_text("flow-confirm-text", f"Limit topic {topic} to 200 messages/s")
        page.click("flow-confirm-yes")
        page.until_text("flow-result", f"limited topic {topic} to 200 messages/s")
        page.until(lambda: topic in page.row_names("limits"))
        assert live.flow("limits")[topic]["per_second"] == 200
        row = next(r for r in page.rows("limits") if r[1] == topic)
        assert row[:3] == ["topic", topic, "200"]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "console-flow.png"))

        page.row_button("limits", topic)  # clear the limit from its row
        page.until_text("flow-confirm-text", f"Remove the rate limit of topic {topic}")
        page.click("flow-confirm-no")
        assert topic in live.flow("limits")
        page.row_button("limits", topic)
        page.click("flow-confirm-yes")
        page.until_text("flow-result", f"removed the rate limit of topic {topic}")
        page.until(lambda: topic not in page.row_names("limits"))
        assert topic not in live.flow("limits")

        page.type("flow-per-second", "0")  # refused by the API: the page says why
        page.click("flow-limit")
        page.click("flow-confirm-yes")
        page.until_text("flow-result", "400: per_second")
        assert topic not in live.flow("limits")
    finally:
        for kind in ("pauses", "limits"):
            for name in (tenant, topic):
                if name in live.flow(kind):
                    query = f"{'tenant' if name == tenant else 'topic'}={name}"
                    live.api(f"/{kind}?{query}", "DELETE")
