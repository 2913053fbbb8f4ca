"""The dashboard's live pages (spotjobs/dashboard/live.py): an event stream that sends a page when
it changed, says it is alive when not, ends after its life (the browser reconnects after `retry`)
and when the page is gone."""

from __future__ import annotations

import pytest
from werkzeug.exceptions import NotFound

from spotjobs.dashboard.live import (
    RECONNECT_MILLISECONDS,
    VERSION_PLACEHOLDER,
    event,
    page_events,
    versioned,
    wants_events,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_page_is_sent_when_it_changed_and_the_stream_ends_after_its_life() -> None:
    clock = Clock()
    pages = iter(["one", "one", "two\nlines", "two\nlines", "three"])

    sent = list(page_events(lambda: next(pages), every_seconds=1, life_seconds=4, clock=clock, sleep=clock.sleep))

    assert sent == [
        f"retry: {RECONNECT_MILLISECONDS}\n\n",
        "event: page\ndata: one\n\n",
        ": unchanged\n\n",
        "event: page\ndata: two\ndata: lines\n\n",
        ": unchanged\n\n",
    ]
    assert clock.now == 3  # four renders in its four seconds, then it ends: the browser reconnects


def test_a_page_the_browser_already_shows_is_not_sent_again() -> None:
    clock = Clock()
    page = f'<main data-version="{VERSION_PLACEHOLDER}">one</main>'
    shown, version = versioned(page)
    assert shown == f'<main data-version="{version}">one</main>'

    sent = list(
        page_events(lambda: page, seen=version, every_seconds=1, life_seconds=2, clock=clock, sleep=clock.sleep)
    )

    assert sent == [f"retry: {RECONNECT_MILLISECONDS}\n\n", ": unchanged\n\n", ": unchanged\n\n"]


def test_a_page_gone_ends_its_stream() -> None:
    clock = Clock()

    def gone() -> str:
        raise NotFound()

    assert list(page_events(gone, every_seconds=1, clock=clock, sleep=clock.sleep)) == [
        f"retry: {RECONNECT_MILLISECONDS}\n\n"
    ]


@pytest.mark.parametrize(
    ("accept", "wanted"),
    [("text/event-stream", True), ("text/html,application/xhtml+xml,*/*;q=0.8", False), (None, False)],
)
def test_only_an_event_source_gets_the_stream(accept: str | None, wanted: bool) -> None:
    assert wants_events(accept) is wanted


def test_an_event_of_a_page_with_a_blank_line_stays_one_event() -> None:
    assert event("page", "a\n\nb") == "event: page\ndata: a\ndata: \ndata: b\n\n"
