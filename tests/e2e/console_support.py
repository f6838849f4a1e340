"""The console's browser tests' shared parts: one live node (real Postgres and broker) and one
headless browser session per test module, and a page driver."""

from __future__ import annotations

import json
import shutil
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Producer

from chronos.config.settings import Secret
from chronos.protocol import DEADLINE_HEADER, MESSAGE_ID_HEADER, format_deadline
from chronos.protocol.names import TENANT_HEADER
from tests.support.cluster import REPO, Cluster, NodeProcess
from tests.support.databases import DatabaseFactory
from tests.support.kafka import delete_topics, new_topics
from tests.support.services import unavailable

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


def live_node(
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


def headless_browser() -> Iterator[Any]:
    """Headless Chromium (the module's ``browser``)."""
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

    def shown(self, selector: str) -> int:
        """How many elements matching ``selector`` are displayed, counted in one script (the page
        re-renders as it polls: an element found in one call may be gone by the next)."""
        count: int = self.browser.execute_script(
            "return [...document.querySelectorAll(arguments[0])].filter((e) =>"
            " e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden').length",
            selector,
        )
        return count

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
