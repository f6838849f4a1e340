"""The console (/console) in a real headless browser (Debian's chromium + chromium-driver, driven
by Selenium) against a live node on the real Postgres and broker: the page shows the backlog
and the node, finds a scheduled series by id (its rule shown) and cancels it. The screenshot is
kept in .chronos/artifacts/console.png."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from chronos.config.settings import Secret
from chronos.protocol import DEADLINE_HEADER, MESSAGE_ID_HEADER, format_deadline
from tests.support import Topics
from tests.support.cluster import REPO, Cluster
from tests.support.polling import eventually
from tests.support.services import unavailable

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

TOKEN = "console-test-token"
ARTIFACTS = REPO / ".chronos" / "artifacts"


@pytest.fixture
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
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def schedule(
    bootstrap: str,
    topic: str,
    message_id: str,
    deadline: datetime,
    extra: list[tuple[str, str | bytes | None]] | None = None,
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    headers: list[tuple[str, str | bytes | None]] = [
        (MESSAGE_ID_HEADER, message_id.encode()),
        (DEADLINE_HEADER, format_deadline(deadline).encode()),
        *(extra or []),
    ]
    producer.produce(topic, key=b"k", value=b"console", headers=headers)
    assert producer.flush(30) == 0


def test_console_finds_a_message_and_cancels_it(
    migrated_database_url: str, kafka_bootstrap: str, topics: Topics, tmp_path: Path, browser: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    cluster = Cluster(migrated_database_url, kafka_bootstrap, topics, tmp_path / "cluster")
    try:
        node = cluster.start(admin_token=Secret(TOKEN))
        cluster.wait_ready([node])
        message_id = f"console-{uuid.uuid4().hex[:8]}"
        for n in range(3):  # a small backlog around it
            later = datetime.now(UTC) + timedelta(hours=1 + n)
            schedule(kafka_bootstrap, topics.input, f"other-{n}", later)
        daily: list[tuple[str, str | bytes | None]] = [
            ("chronosCron", b"0 9 * * 1-5"),
            ("chronosTimeZone", b"Europe/Paris"),
        ]
        due = datetime.now(UTC) + timedelta(hours=2)
        schedule(kafka_bootstrap, topics.input, message_id, due, daily)  # a series
        assert cluster.table.wait(lambda t: message_id in t.ids(), timeout=30)

        wait = WebDriverWait(browser, 20)
        browser.get(f"http://127.0.0.1:{node.settings.http_port}/console")
        assert browser.title == "Chronos console"
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        browser.find_element(By.ID, "save-token").click()
        wait.until(expected_conditions.text_to_be_present_in_element((By.ID, "waiting"), "4"))
        wait.until(
            expected_conditions.text_to_be_present_in_element((By.ID, "nodes"), node.node_id)
        )
        assert "leader" in browser.find_element(By.ID, "nodes").text
        assert browser.execute_script("return sessionStorage.getItem('chronos-admin-token')") == (
            TOKEN
        )

        browser.find_element(By.ID, "lookup-id").send_keys(message_id)
        browser.find_element(By.ID, "lookup").click()
        wait.until(
            expected_conditions.text_to_be_present_in_element((By.ID, "field-state"), "waiting")
        )
        assert browser.find_element(By.ID, "field-id").text == message_id
        rule = browser.find_element(By.ID, "field-recurrence").text
        assert "cron '0 9 * * 1-5' in Europe/Paris" in rule, rule
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "console.png"))

        browser.find_element(By.ID, "cancel").click()
        wait.until(expected_conditions.alert_is_present()).accept()
        wait.until(
            expected_conditions.text_to_be_present_in_element((By.ID, "message-note"), "cancelled")
        )
        assert eventually(lambda: message_id not in cluster.table.ids(), timeout=5)
        wait.until(expected_conditions.text_to_be_present_in_element((By.ID, "waiting"), "3"))
        browser.save_screenshot(str(ARTIFACTS / "console-cancelled.png"))

        # Looking it up again: the history says how it ended (cancelled, through the API).
        browser.find_element(By.ID, "lookup").click()
        wait.until(
            expected_conditions.text_to_be_present_in_element((By.ID, "message-summary"), "cancel")
        )
        # An id never scheduled: the API's 404, shown in the page.
        browser.find_element(By.ID, "lookup-id").clear()
        browser.find_element(By.ID, "lookup-id").send_keys(f"never-{uuid.uuid4().hex[:8]}")
        browser.find_element(By.ID, "lookup").click()
        wait.until(
            expected_conditions.text_to_be_present_in_element((By.ID, "message-note"), "404")
        )
    finally:
        cluster.close()
