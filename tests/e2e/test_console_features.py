"""The console's operator features in a real headless browser against one live node (real
Postgres and broker), one node and one browser session for the module: the message browser
(filters, count, an estimate past 10,000, cursor paging), a message's whole record, bulk
actions by the search with the dry-run count shown before the confirmation, the tenants panel,
the cluster's fire rate, "overdue" judged by the database clock (not the browser's), a
read-only token that sees no write action, and the dead letters browsed by reason and
replayed, the count shown first."""

from __future__ import annotations

import json
import shutil
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer

from chronos.config.settings import Secret
from chronos.protocol import DEADLINE_HEADER, MESSAGE_ID_HEADER, format_deadline
from chronos.protocol.names import TENANT_HEADER
from tests.support.cluster import REPO, Cluster, NodeProcess
from tests.support.databases import DatabaseFactory
from tests.support.dead_letters import write_dead_letters
from tests.support.kafka import delete_topics, new_topics
from tests.support.services import unavailable

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

TOKEN = "console-admin-token"
READ_TOKEN = "console-read-token"
WAIT_S = 20
ARTIFACTS = REPO / ".chronos" / "artifacts"
NOTHING = "\u2013"  # what the page shows before it knows a figure


@dataclass
class Live:
    cluster: Cluster
    node: NodeProcess
    bootstrap: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.node.settings.http_port}"

    def api(self, path: str, method: str = "GET") -> Any:
        request = urllib.request.Request(
            self.url + "/admin/v1" + path,
            headers={"Authorization": f"Bearer {TOKEN}"},
            method=method,
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def flow(self, kind: str) -> dict[str, dict[str, Any]]:
        """The pauses (``kind`` "pauses") or limits by their name, as the API lists them."""
        return {x["name"]: x for x in self.api("/" + kind)[kind]}

    def schedule(
        self, tenant: str, ids: list[str], *, key: Callable[[int], bytes] = lambda n: b"k"
    ) -> None:
        """Schedule ``ids`` for ``tenant`` an hour and more from now; wait until stored."""
        producer = Producer({"bootstrap.servers": self.bootstrap})
        for n, message_id in enumerate(ids):
            deadline = datetime.now(UTC) + timedelta(hours=1, minutes=n)
            headers: list[tuple[str, str | bytes | None]] = [
                (MESSAGE_ID_HEADER, message_id.encode()),
                (DEADLINE_HEADER, format_deadline(deadline).encode()),
                (TENANT_HEADER, tenant.encode()),
                ("traceparent", f"trace-{n}".encode()),
            ]
            producer.produce(
                self.cluster.topics.input,
                key=key(n),
                value=b"payload " + message_id.encode(),
                headers=headers,
            )
        assert producer.flush(30) == 0
        wanted = set(ids)
        assert self.cluster.table.wait(lambda t: wanted <= t.ids(), timeout=30)


@pytest.fixture(scope="module")
def live(
    database_factory: DatabaseFactory,
    kafka_bootstrap: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Live]:
    url = database_factory.create_migrated()
    topics = new_topics(kafka_bootstrap, "console-features")
    cluster = Cluster(url, kafka_bootstrap, topics, tmp_path_factory.mktemp("console"))
    try:
        node = cluster.start(admin_token=Secret(TOKEN), admin_read_token=Secret(READ_TOKEN))
        cluster.wait_ready([node])
        yield Live(cluster, node, kafka_bootstrap)
    finally:
        cluster.close()
        delete_topics(kafka_bootstrap, topics)
        database_factory.drop(url)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        unavailable("selenium is not installed (requirements/dev.lock)")
    chromium = shutil.which("chromium")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        unavailable("chromium and chromium-driver are not installed (`make test` installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1600"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """The console in the browser: find, type, click and wait by element id."""

    def __init__(self, browser: Any, live: Live, token: str = TOKEN) -> None:
        from selenium.webdriver.support.wait import WebDriverWait

        self.browser = browser
        self.wait = WebDriverWait(browser, WAIT_S)
        browser.get(live.url + "/console")
        assert browser.title == "Chronos console"
        field = self.el("token")
        field.clear()
        field.send_keys(token)
        self.click("save-token")
        self.until_text("status", "connected")

    def el(self, element_id: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.browser.find_element(By.ID, element_id)

    def click(self, element_id: str) -> None:
        self.el(element_id).click()

    def type(self, element_id: str, text: str) -> None:
        field = self.el(element_id)
        field.clear()
        field.send_keys(text)

    def text(self, element_id: str) -> str:
        return str(self.el(element_id).text)

    def until_text(self, element_id: str, text: str) -> None:
        from selenium.webdriver.support import expected_conditions

        self.wait.until(expected_conditions.text_to_be_present_in_element(("id", element_id), text))

    def until(self, condition: Callable[[], bool]) -> None:
        self.wait.until(lambda _: condition())

    def rows(self, element_id: str) -> list[list[str]]:
        """The cells of a table body, read in one script (the page re-renders as it polls)."""
        rows: list[list[str]] = self.browser.execute_script(
            "return [...document.getElementById(arguments[0]).rows]"
            ".map((tr) => [...tr.cells].map((td) => td.textContent))",
            element_id,
        )
        return rows

    def pick(self, element_id: str, first_cell: str) -> None:
        """Click the row of a table body whose first cell is ``first_cell``."""
        clicked = self.browser.execute_script(
            "const tr = [...document.getElementById(arguments[0]).rows]"
            ".find((r) => r.cells[0].textContent === arguments[1]);"
            "if (tr) tr.click(); return !!tr;",
            element_id,
            first_cell,
        )
        assert clicked, f"no row {first_cell!r} in #{element_id}"

    def row_button(self, element_id: str, name: str) -> None:
        """Click the button of a table body's row whose second cell is ``name``."""
        clicked = self.browser.execute_script(
            "const tr = [...document.getElementById(arguments[0]).rows]"
            ".find((r) => r.cells.length > 1 && r.cells[1].textContent === arguments[1]);"
            "const b = tr && tr.querySelector('button'); if (b) b.click(); return !!b;",
            element_id,
            name,
        )
        assert clicked, f"no row {name!r} with a button in #{element_id}"

    def row_names(self, element_id: str) -> list[str]:
        return [row[1] for row in self.rows(element_id) if len(row) > 1]

    def search(self, **filters: str) -> None:
        for name in ("tenant", "topic", "id_prefix", "key", "deadline_from", "deadline_to"):
            self.type(f"f-{name}", filters.get(name, ""))
        self.click("browse")


def ids_of(tenant: str, count: int) -> list[str]:
    run = uuid.uuid4().hex[:6]
    return [f"{tenant}-{run}-{n:02d}" for n in range(count)]


def test_the_browser_filters_counts_and_pages_and_shows_a_whole_record(
    live: Live, browser: Any
) -> None:
    ids = ids_of("acme", 30)
    live.schedule("acme", ids, key=lambda n: f"order-{n}".encode())
    live.schedule("globex", ids_of("globex", 3))
    page = Page(browser, live)

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
    # The node read the replayed records from its input topic like any other.
    assert live.cluster.table.wait(lambda t: {"t0", "t1"} <= t.ids(), timeout=30)

    reader = Page(browser, live, READ_TOKEN)  # reads, and sees no replay action
    reader.until_text("role", "read-only token")
    reader.until(lambda: len(reader.rows("dl-list")) >= 3)
    assert not reader.el("dl-bar").is_displayed()
    assert not any(box.is_displayed() for box in browser.find_elements("css selector", ".dl-pick"))


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
