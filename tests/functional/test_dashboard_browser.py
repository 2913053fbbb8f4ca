"""`spotjobs dashboard` in a real browser (issue 47): Debian's Chromium, headless, driven by Selenium
through chromium-driver, over the app serving a real ledger (fake-gcs-server). The pages show a
request's attempts and pick up a preemption live, by server-sent events (no reload, no poll),
through the stream's end and the browser's reconnect; a hostile job's text stays text; a request is
cancelled from its page and ends CANCELLED; the Alerts page lists the alerts log, a new alert
appearing live. A screenshot of each page lands in tests/artifacts/.

Skips when Chromium or its driver is absent locally; fails instead in CI (`.ci/run` installs them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
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


STREAM_SECONDS = 2.0  # each event stream ends this soon: the test sees the browser reconnect


@dataclass
class Served:
    url: str
    ledger: LedgerStore
    streams: list[str]  # the paths an event stream was asked for, in order


@pytest.fixture
def served(gcs_bucket) -> Iterator[Served]:  # noqa: ANN001 - the conftest's bucket
    """The app on a free loopback port, rendering a live page every half second over event streams
    that end after `STREAM_SECONDS`; yields its URL, its ledger and the streams asked for."""
    from flask import request

    ledger = LedgerStore(gcs_bucket)
    app = create_app(deployment(ledger, bucket=gcs_bucket), poll_milliseconds=500, stream_seconds=STREAM_SECONDS)
    streams: list[str] = []

    @app.before_request
    def note_streams() -> None:
        if "text/event-stream" in request.headers.get("Accept", ""):
            streams.append(request.path)

    with serving(app) as url:
        yield Served(url, ledger, streams)


def waiting(request_id: str) -> RequestRecord:
    """A request no attempt was created for yet: a cancel ends it CANCELLED at once."""
    return RequestRecord(request_id, envelope(request_id), f"gs://out/{request_id}", status=RequestStatus.SUBMITTED)


def test_the_pages_show_attempts_live_and_a_cancel_ends_the_request(browser: Any, served: Served) -> None:
    from selenium.webdriver.common.by import By

    url, ledger = served.url, served.ledger
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
    # Its stream ends and the browser opens another (no reload: the page is the one loaded).
    browser.execute_script("document.body.dataset.loaded = 'once'")
    wait_for(browser, lambda b: served.streams.count("/requests/train-live") >= 2)
    # attempt 2 starts: the open page picks it up by itself, from the event stream
    ledger.update("train-live", lambda current: replace(current, attempts=running.attempts))
    wait_for(browser, lambda b: len(b.find_elements(By.CSS_SELECTOR, ".bar")) == 2)
    assert "STANDARD" in browser.find_element(By.CSS_SELECTOR, '.bar[data-attempt="2"]').get_attribute("class")
    assert browser.execute_script("return document.body.dataset.loaded") == "once"
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


def test_the_alerts_page_shows_the_alerts_log_and_a_new_alert_live(browser: Any, served: Served) -> None:
    from selenium.webdriver.common.by import By

    from shared.alerts import Alert, AlertKind
    from shared.deciding.alert_log import log_alert

    log_alert(served.ledger, Alert.of(AlertKind.JOB_FAILED, HOSTILE, request_id="train-bad", attempt=1))
    browser.get(served.url + "/alerts")
    [row] = browser.find_elements(By.CSS_SELECTOR, "#alerts tbody tr")
    assert row.get_attribute("data-kind") == "job_failed" and "<script>alert(1)</script>" in row.text  # inert
    assert browser.execute_script("return document.querySelectorAll('script').length") == 1

    storm = Alert.of(AlertKind.PREEMPTION_STORM, "attempt 2 preempted 6 times", request_id="train-live", attempt=2)
    log_alert(served.ledger, storm)  # as the outbox does before it publishes
    kinds = "return [...document.querySelectorAll('#alerts tbody tr')].map(row => row.dataset.kind)"
    assert wait_for(browser, lambda b: b.execute_script(kinds) == ["preemption_storm", "job_failed"])
    assert "/alerts" in served.streams
    screenshot(browser, "alerts")
    browser.find_element(By.LINK_TEXT, "train-live").click()
    assert browser.current_url.endswith("/requests/train-live")
