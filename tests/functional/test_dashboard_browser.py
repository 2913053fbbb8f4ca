"""`spotjobs dashboard` in a real browser (issue 47): Debian's Chromium, headless, driven by Selenium
through chromium-driver, over the app serving a real ledger (fake-gcs-server). The pages show a
request's attempts and pick up a preemption live; a hostile job's text stays text; a request is
cancelled from its page and ends CANCELLED. A screenshot of each page lands in tests/artifacts/.

Skips when Chromium or its driver is absent locally; fails instead in CI (`.ci/run` installs them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from shared.ledger.records import RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from spotjobs.dashboard.app import create_app
from tests.support.dashboard import (
    HOSTILE,
    chromium_driver,
    deployment,
    envelope,
    preempted_then_running,
    screenshot,
    serving,
    wait_for,
)


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium_driver() as driver:
        yield driver


@pytest.fixture
def served(gcs_bucket) -> Iterator[tuple[str, LedgerStore]]:  # noqa: ANN001 - the conftest's bucket
    """The app on a free loopback port, polling every half second; yields its URL and its ledger."""
    ledger = LedgerStore(gcs_bucket)
    with serving(create_app(deployment(ledger, bucket=gcs_bucket), poll_milliseconds=500)) as url:
        yield url, ledger


def waiting(request_id: str) -> RequestRecord:
    """A request no attempt was created for yet: a cancel ends it CANCELLED at once."""
    return RequestRecord(request_id, envelope(request_id), f"gs://out/{request_id}", status=RequestStatus.SUBMITTED)


def test_the_pages_show_attempts_live_and_a_cancel_ends_the_request(browser: Any, served: Any) -> None:
    from selenium.webdriver.common.by import By

    url, ledger = served
    running = preempted_then_running("train-live", error=HOSTILE)
    ledger.restore(replace(running, attempts=running.attempts[:1], status=RequestStatus.RUNNING))
    ledger.restore(waiting("train-cancel"))

    browser.get(url + "/")
    rows = browser.find_elements(By.CSS_SELECTOR, "#requests tbody tr")
    assert {row.get_attribute("data-request") for row in rows} == {"train-live", "train-cancel"}
    assert "SUBMITTED 1" in browser.find_element(By.ID, "counts").text
    screenshot(browser, "requests")

    browser.get(url + "/requests/train-live")
    assert len(browser.find_elements(By.CSS_SELECTOR, ".bar")) == 1
    first = browser.find_element(By.CSS_SELECTOR, '.bar[data-attempt="1"]')
    assert "preempted 2" in first.text and first.value_of_css_property("left") == "0px"  # placed by the script
    assert "<script>alert(1)</script>" in browser.find_element(By.ID, "attempts").text  # shown, not run
    assert browser.execute_script("return document.querySelectorAll('script').length") == 1
    # attempt 2 starts: the open page picks it up by itself
    ledger.update("train-live", lambda current: replace(current, attempts=running.attempts))
    wait_for(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, ".bar")) == 2)
    assert "STANDARD" in browser.find_element(By.CSS_SELECTOR, '.bar[data-attempt="2"]').get_attribute("class")
    screenshot(browser, "request")

    browser.get(url + "/requests/train-cancel")
    browser.find_element(By.ID, "cancel").click()
    screenshot(browser, "cancel-confirmation")
    browser.find_element(By.NAME, "reason").send_keys("wrong dataset")
    browser.find_element(By.ID, "confirm").click()
    wait_for(browser, lambda b: b.find_element(By.ID, "status").text == "CANCELLED")
    assert "wrong dataset" in browser.find_element(By.ID, "cancelled").text
    assert ledger.get("train-cancel").status is RequestStatus.CANCELLED
    screenshot(browser, "cancelled")

    browser.get(url + "/fleet")
    assert "no fleet observations" in browser.find_element(By.ID, "live").text
    screenshot(browser, "fleet")
    browser.find_element(By.LINK_TEXT, "Dead letters").click()
    assert "no dead-letter subscription" in browser.find_element(By.ID, "unreachable").text
