"""The console's operator features in a real headless browser against one live node (real
Postgres and broker), one node and one browser session for the module: the message browser
(filters, count, an estimate past 10,000, cursor paging), a message's whole record, bulk
actions by the search with the dry-run count shown before the confirmation, the tenants panel,
the cluster's fire rate, "overdue" judged by the database clock (not the browser's), a
read-only token that sees no write action, and no shards panel on one database. The dead
letters and flow control: tests/e2e/test_console_operations.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.e2e.console_support import (
    ARTIFACTS,
    NOTHING,
    READ_TOKEN,
    TOKEN,
    Live,
    Page,
    ids_of,
)

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]


def test_the_browser_filters_counts_and_pages_and_shows_a_whole_record(
    live: Live, browser: Any
) -> None:
    ids = ids_of("acme", 30)
    live.schedule("acme", ids, key=lambda n: f"order-{n}".encode())
    live.schedule("globex", ids_of("globex", 3))
    page = Page(browser, live)
    # One database: the shards panel is asked once and stays hidden.
    page.until(lambda: page.browser.execute_script("return sharded") is False)
    assert page.shown("#shards-section") == 0

    page.search(tenant="acme")
    page.until_text("browse-count", "30 message(s) match")
    page.until(lambda: len(page.rows("browse-list")) == 25)
    assert {row[3] for row in page.rows("browse-list")} == {"acme"}
    assert page.rows("browse-list")[0][0] == ids[0]  # by deadline
    page.click("next-page")
    page.until_text("page-info", "page 2")
    assert [row[0] for row in page.rows("browse-list")] == ids[25:]
    assert not page.el("next-page").is_enabled()
    page.click("first-page")
    page.until_text("page-info", "page 1")
    assert page.rows("browse-list")[0][0] == ids[0]

    prefix = ids[10][:-1]  # the ids ...-10 to ...-19
    page.search(tenant="acme", id_prefix=prefix)
    page.until_text("browse-count", "10 message(s) match")
    page.search(tenant="acme", key="order-3")
    page.until_text("browse-count", "1 message(s) match")
    page.until(lambda: page.rows("browse-list")[0][0] == ids[3])

    page.pick("browse-list", ids[3])  # its whole record
    page.until_text("field-id", ids[3])
    assert page.text("field-tenant") == "acme"
    assert page.text("field-key") == "order-3"
    assert page.text("field-state") == "waiting"
    assert "traceparent: trace-3" in page.text("field-headers")
    assert page.text("field-value_preview") == f"payload {ids[3]}"
    assert page.text("field-recurrence") == "fires once"
    assert page.text("field-expires_ms") == "(CHRONOS_MAX_LATENESS_MS)"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "console-browser.png"))


def test_bulk_actions_show_the_dry_run_count_before_they_act(live: Live, browser: Any) -> None:
    ids = ids_of("bulk", 6)
    live.schedule("bulk", ids)
    page = Page(browser, live)
    page.search(tenant="bulk")
    page.until_text("browse-count", "6 message(s) match")

    def deadlines() -> dict[str, str]:
        return {m["id"]: m["deadline"] for m in live.api("/messages?tenant=bulk")["messages"]}

    before = deadlines()
    page.type("bulk-shift-minutes", "30")
    page.click("bulk-shift")
    page.until_text("bulk-confirm-text", "6 message(s)")
    assert "shift by 30 min" in page.text("bulk-confirm-text")
    page.click("bulk-confirm-no")  # backing out changes nothing
    assert not page.el("bulk-confirm").is_displayed()
    assert deadlines() == before
    page.click("bulk-shift")
    page.until_text("bulk-confirm-text", "6 message(s)")
    page.click("bulk-confirm-yes")
    page.until_text("bulk-result", "rescheduled 6")
    after = deadlines()
    for message_id, deadline in before.items():
        moved = datetime.fromisoformat(after[message_id]) - datetime.fromisoformat(deadline)
        assert moved == timedelta(minutes=30), message_id

    target = "2031-05-01T08:00:00Z"
    page.type("bulk-deadline", target)
    page.click("bulk-set")
    page.until_text("bulk-confirm-text", "6 message(s)")
    page.click("bulk-confirm-yes")
    page.until_text("bulk-result", "rescheduled 6")
    assert {datetime.fromisoformat(d) for d in deadlines().values()} == {
        datetime(2031, 5, 1, 8, tzinfo=UTC)
    }

    page.click("bulk-cancel")
    page.until_text("bulk-confirm-text", "Cancel 6 message(s)")
    page.click("bulk-confirm-yes")
    page.until_text("bulk-result", "cancelled 6")
    page.until_text("browse-count", "0 message(s) match")
    assert not set(ids) & live.cluster.table.ids()


def test_fire_now_by_filter_and_the_clusters_fire_rate(live: Live, browser: Any) -> None:
    ids = ids_of("fire", 20)
    live.schedule("fire", ids)
    page = Page(browser, live)
    assert page.text("fired-rate") in ("0.0", NOTHING)
    page.search(tenant="fire")
    page.until_text("browse-count", "20 message(s) match")
    page.click("bulk-fire")
    page.until_text("bulk-confirm-text", "20 message(s)")
    assert "fire now" in page.text("bulk-confirm-text")
    page.click("bulk-confirm-yes")
    page.until_text("bulk-result", "rescheduled 20")
    assert live.cluster.table.wait(lambda t: not set(ids) & t.ids(), timeout=30)

    # The rate the node wrote with its heartbeat (over its last 10 s), summed by the API into
    # the cluster's, both shown from the same refresh of the page.
    def shown() -> tuple[float, float]:
        """The cluster's rate and the node's, read in one script (one state of the page)."""
        cluster, own = browser.execute_script(
            "return [document.getElementById('fired-rate').textContent,"
            " document.querySelector('#nodes tr td:nth-child(6)').textContent]"
        )
        return float(cluster.replace(NOTHING, "0")), float(own.replace(NOTHING, "0"))

    page.until(lambda: shown()[0] > 0)
    cluster, own = shown()
    assert cluster == own > 0  # one node: the cluster's rate is its own
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "console-fired.png"))


def test_the_tenants_panel_opens_a_tenants_messages(live: Live, browser: Any) -> None:
    live.schedule("panel", ids_of("panel", 3))
    page = Page(browser, live)
    page.until(lambda: any(row[:2] == ["panel", "3"] for row in page.rows("tenants")))
    page.pick("tenants", "panel")
    page.until_text("browse-count", "3 message(s) match")
    assert page.el("f-tenant").get_attribute("value") == "panel"
    assert {row[3] for row in page.rows("browse-list")} == {"panel"}


def test_overdue_is_judged_by_the_database_clock(live: Live, browser: Any) -> None:
    """A browser whose clock runs three hours fast: messages due in an hour are not overdue,
    and the page shows the database's time."""
    ids = ids_of("clock", 2)
    live.schedule("clock", ids)
    fast = """
        const RealDate = Date, shift = 3 * 3600 * 1000;
        class FastDate extends RealDate {
          constructor(...a) { if (a.length === 0) super(RealDate.now() + shift); else super(...a); }
          static now() { return RealDate.now() + shift; }
        }
        window.Date = FastDate;
    """
    script = browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": fast})
    try:
        page = Page(browser, live)
        assert (
            browser.execute_script("return Date.now()")
            > (datetime.now(UTC) + timedelta(hours=2)).timestamp() * 1000
        )
        page.until(lambda: page.text("db-time") != NOTHING)
        shown = datetime.fromisoformat(page.text("db-time"))
        assert abs(shown - live.cluster.table.now()) < timedelta(minutes=1)
        assert page.text("overdue") == "0"
        assert page.rows("overdue-list") == [["none"]]
    finally:
        browser.execute_cdp_cmd(
            "Page.removeScriptToEvaluateOnNewDocument", {"identifier": script["identifier"]}
        )


def test_a_read_only_token_sees_no_write_action(live: Live, browser: Any) -> None:
    ids = ids_of("reader", 1)
    live.schedule("reader", ids)
    page = Page(browser, live, READ_TOKEN)
    page.until_text("role", "read-only token")
    page.type("lookup-id", ids[0])
    page.click("lookup")
    page.until_text("field-id", ids[0])
    for hidden in ("cancel", "requeue", "bulk-cancel", "bulk-shift", "bulk-set", "bulk-fire"):
        assert not page.el(hidden).is_displayed(), hidden
    page.search(tenant="reader")
    page.until_text("browse-count", "1 message(s) match")  # reading still works
    assert not page.el("bulk-bar").is_displayed()
    live.api("/pauses?tenant=reader", "POST")
    live.api("/limits?tenant=reader&per_second=9", "POST")
    try:  # the read-only token sees the pauses and limits, and no control to change them
        page.until(lambda: "reader" in page.row_names("pauses"))
        page.until(lambda: "reader" in page.row_names("limits"))
        assert not page.el("flow-bar").is_displayed()
        buttons = page.browser.execute_script(
            "return [...document.querySelectorAll('#pauses button, #limits button')]"
            ".map((b) => b.offsetParent !== null)"
        )
        assert buttons == [False, False]
    finally:
        live.api("/pauses?tenant=reader", "DELETE")
        live.api("/limits?tenant=reader", "DELETE")

    page = Page(browser, live, TOKEN)  # the admin token: the actions are back
    page.until_text("role", "admin token")
    page.type("lookup-id", ids[0])
    page.click("lookup")
    page.until_text("field-id", ids[0])
    assert page.el("cancel").is_displayed()
    assert page.el("bulk-bar").is_displayed()
    assert page.el("flow-bar").is_displayed()
