"""`spotjobs dashboard` against `spotjobs local up` (issue 47's acceptance): the app over the
deployment the CLI reaches in the embedded stack (its bucket, its Vertex emulator's logs,
`spotjobs.cancel`), in headless Chromium. A demo request is preempted on its Spot attempt and
re-queued: its open page shows the two attempts and the preemptions as they happen. Another
request is cancelled from its page and ends CANCELLED.

What is waited for are states (the ledger's, then the page's), never durations: the page polls
every half second, and each wait is a bound a loaded machine may need."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.ledger.states import RequestStatus
from spotjobs.dashboard.app import create_app
from spotjobs.dashboard.reading import deployment_of
from tests.support.dashboard import chromium_driver, screenshot, serving, wait_for
from tests.support.reconcile_passes import passes_until
from tests.support.stack_events import new_request_id, submit, wait_for_status

pytestmark = [pytest.mark.stack, pytest.mark.timeout(600)]

STACK_WAIT_SECONDS = 240  # a re-queue through the emulators on a busy machine
LONG = {"steps": 100_000}  # only the cancel ends it


def is_cancelled(stack: Any, request_id: str) -> bool:
    return stack.ledger().get(request_id).status is RequestStatus.CANCELLED


LISTED = "return [...document.querySelectorAll('#requests tbody tr')].map(row => row.dataset.request)"
BARS = "return [...document.querySelectorAll('.bar')].map(bar => [bar.dataset.attempt, bar.className, bar.textContent])"


def bars(browser: Any) -> list[list[str]]:
    """The timeline's bars read at once (a poll replaces them: an element found earlier goes stale)."""
    return browser.execute_script(BARS)


def text_of(browser: Any, element_id: str) -> str | None:
    return browser.execute_script(f"return document.getElementById({json.dumps(element_id)})?.textContent ?? null")


def click(browser: Any, by: str, name: str) -> bool:
    browser.find_element(by, name).click()
    return True


def test_the_dashboard_shows_a_preempted_request_live_and_cancels_another(stack: Any) -> None:
    from selenium.webdriver.common.by import By

    demo = new_request_id("dash-demo")
    victim = new_request_id("dash-cancel")
    app = create_app(deployment_of(stack.settings), poll_milliseconds=500)
    with chromium_driver() as browser, serving(app) as url:
        submit(stack, demo, preemptions=7, after_checkpoints=1, steps=1500)
        submit(stack, victim, **LONG)
        wait_for_status(stack, demo, *RequestStatus)  # its record exists
        browser.get(f"{url}/requests/{demo}")

        # The page, left open, follows the request through its preemptions and re-queue.
        two = wait_for(browser, lambda b: len(bars(b)) == 2 and bars(b), STACK_WAIT_SECONDS)
        first = two[0]
        assert first[0] == "1" and "strategy-SPOT" in first[1] and "preempted" in first[1] and "preempted" in first[2]
        wait_for(browser, lambda b: text_of(b, "status") == RequestStatus.SUCCEEDED, STACK_WAIT_SECONDS)
        first_attempt, _ = stack.ledger().get(demo).attempts
        assert first_attempt.outcome == "requeued" and first_attempt.preemptions
        wait_for(browser, lambda b: text_of(b, "preemptions") == str(first_attempt.preemptions))
        screenshot(browser, "stack-request")

        browser.get(f"{url}/")  # opens on the active requests: the demo has ended
        active = wait_for(browser, lambda b: b.execute_script(LISTED))
        assert victim in active and demo not in active
        browser.get(f"{url}/?all=1")
        listed = wait_for(browser, lambda b: b.execute_script(LISTED))
        assert {demo, victim} <= set(listed)
        screenshot(browser, "stack-requests")

        wait_for_status(stack, victim, RequestStatus.RUNNING, timeout=STACK_WAIT_SECONDS)
        browser.get(f"{url}/requests/{victim}")
        wait_for(browser, lambda b: click(b, By.ID, "cancel"))
        browser.find_element(By.NAME, "reason").send_keys("from the dashboard")
        browser.find_element(By.ID, "confirm").click()
        # A running request's cancel ends when its job has: reconcile passes, one at a time, see it end.
        passes_until(stack, lambda: is_cancelled(stack, victim), f"{victim} CANCELLED", timeout=STACK_WAIT_SECONDS)
        wait_for(browser, lambda b: text_of(b, "status") == RequestStatus.CANCELLED, STACK_WAIT_SECONDS)
        assert "from the dashboard" in text_of(browser, "cancelled")
        screenshot(browser, "stack-cancelled")
