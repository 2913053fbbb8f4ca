"""Live pages by server-sent events (https://html.spec.whatwg.org/multipage/server-sent-events.html):
a page's script opens an `EventSource` on its own URL, which asks for `text/event-stream`; the
app then renders the page again every `every_seconds` and sends it as a `page` event when it
changed (a comment line when not, so a browser gone is noticed at the next write). The script
swaps the page's `<main>` for the new one (parsed by DOMParser: nothing in it runs).

What changed is told by a page's version, a digest of it written into it (`versioned`): the
script's stream names the version it shows (`?seen=`), so a page just loaded is not sent again
(and the elements a reader holds stay).

A stream lives `life_seconds` at most, then ends: the browser reconnects after `RECONNECT_MILLISECONDS`
(the `retry` field) and gets the page as it is then, so no connection, nor the thread serving it,
outlives a few minutes, and a page whose request ended stops being read once its tab is closed.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from werkzeug.exceptions import HTTPException

if TYPE_CHECKING:
    from flask import Response

EVENT_STREAM = "text/event-stream"
RECONNECT_MILLISECONDS = 1000
STREAM_SECONDS = 300.0
VERSION_PLACEHOLDER = "version-of-this-page"  # where a template puts the page's version
SEEN = "seen"  # the stream's argument: the version the browser shows
VERSION_CHARACTERS = 16


def versioned(page: str) -> tuple[str, str]:
    """`page` with its version (a digest of the page as rendered) written in, and the version."""
    version = hashlib.sha256(page.encode()).hexdigest()[:VERSION_CHARACTERS]
    return page.replace(VERSION_PLACEHOLDER, version, 1), version


def wants_events(accept: str | None) -> bool:
    """Whether a request's Accept header asks for the event stream (an `EventSource` sends it)."""
    return EVENT_STREAM in (accept or "")


def event(name: str, data: str) -> str:
    """One event: every line of `data` on a `data:` line of its own (the browser joins them)."""
    lines = "".join(f"data: {line}\n" for line in data.split("\n"))
    return f"event: {name}\n{lines}\n"


def page_events(
    render: Callable[[], str],
    *,
    every_seconds: float,
    seen: str | None = None,
    life_seconds: float = STREAM_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[str]:
    """The stream of a live page: `render`ed at once and every `every_seconds`, sent when its
    version is not the last sent (at first: `seen`, the browser's), for `life_seconds`. A page that
    cannot be rendered any more (its request removed: a 404) ends the stream."""
    ends = clock() + life_seconds
    yield f"retry: {RECONNECT_MILLISECONDS}\n\n"
    last = seen
    while True:
        try:
            page, version = versioned(render())
        except HTTPException:
            return
        yield event("page", page) if version != last else ": unchanged\n\n"
        last = version
        if clock() + every_seconds >= ends:
            return
        sleep(every_seconds)


def stream(render: Callable[[], str], seen: str | None, every_seconds: float, life_seconds: float) -> Response:
    """The event stream of a page, in the request's context (its session, its arguments)."""
    from flask import Response, stream_with_context

    events = page_events(render, seen=seen, every_seconds=every_seconds, life_seconds=life_seconds)
    return Response(stream_with_context(events), mimetype=EVENT_STREAM, headers={"X-Accel-Buffering": "no"})
