"""A reconcile pass's listing and call window (shared/reconcile_vertex.py) at the edges the
fourteenth mutation pass found untested: the listing's later pages are sent whatever the budget
(the listings are always made, and counted), and a location is closed to calls at the same
instant `sending` starts refusing them, not before."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from google.api_core.exceptions import ServiceUnavailable

from shared.reconcile_vertex import CallWindow, VertexPass
from shared.wiring import Ports
from tests.support.decisions import CapturedLog, make_settings

START = datetime(2026, 12, 7, 13, 0, tzinfo=UTC)
LOCATION = "us-central1"


class PagedJobs:
    """A location's Vertex: its list answers one job a page, each next page asked lazily by the
    pager (one call each) once the page before it, naming a `next_page_token`, is used up."""

    def __init__(self, names: list[str], *, list_error: Exception | None = None) -> None:
        self.jobs = [SimpleNamespace(name=name) for name in names]
        self.list_error = list_error
        self.pages_sent = 0
        self.gets: list[str] = []

    def list_custom_jobs(self, request: dict[str, Any], **_: Any) -> Any:
        if self.list_error is not None:
            raise self.list_error
        jobs, vertex = self.jobs, self

        class Pager:
            @property
            def pages(self) -> Any:
                for k, job in enumerate(jobs):
                    vertex.pages_sent += 1
                    yield SimpleNamespace(custom_jobs=[job], next_page_token=str(k + 1) if k + 1 < len(jobs) else "")

        return Pager()

    def get_custom_job(self, *, name: str, **_: Any) -> Any:
        self.gets.append(name)
        return SimpleNamespace(name=name)


def a_pass(vertex: PagedJobs, log: CapturedLog, *, at: datetime = START, **settings: Any) -> VertexPass:
    """A pass begun at START, its clock standing at `at` (its window: 300 s, calls of 30 s)."""
    configured = replace(make_settings("reconcile-vertex-mutants"), reconcile_timeout_seconds=300.0, **settings)
    assert configured.vertex_call_timeout_seconds == 30.0
    ports = Ports(configured, None, lambda: None, lambda _location: vertex, clock=lambda: at)  # type: ignore[arg-type]
    return VertexPass(ports, log.logger, started=START)


def test_a_listing_of_several_pages_is_made_whole_past_a_spent_budget_and_answers_every_get() -> None:
    names = [f"projects/p/locations/{LOCATION}/customJobs/{k}" for k in (1, 2, 3)]
    vertex = PagedJobs(names)
    one_call_a_minute = 1 / 600  # the listing's first page spends it
    vertex_pass = a_pass(vertex, CapturedLog(), reconcile_crud_share=one_call_a_minute)
    assert vertex_pass.budget.per_minute == 1

    client = vertex_pass.job_service(LOCATION)
    answered = [client.get_custom_job(name=name).name for name in names]

    assert answered == names and vertex.gets == []  # every one from the listing: no get sent
    assert vertex.pages_sent == 3 and vertex_pass.budget.calls == {"list": 3}  # each page counted
    assert vertex_pass.usage()["answered_by_listing"] == 3


def test_a_location_is_closed_to_calls_exactly_when_sending_there_is_refused() -> None:
    now = START
    calls = CallWindow(START + timedelta(seconds=300), 30.0, lambda: now)
    now = START + timedelta(seconds=300 - 3 * 30)  # the last instant a request's call may start

    assert not calls.closed_to(LOCATION)
    with calls.sending(LOCATION):
        pass

    now += timedelta(milliseconds=1)
    assert calls.closed_to(LOCATION)


def test_a_listing_that_fails_at_the_last_instant_a_call_may_start_is_said_failed_and_its_gets_are_sent() -> None:
    """The window is still open at that instant (a request's: the last call timeout is the stray
    sweep's): the location's jobs are read with gets, and the line says so
    (`reconcile_listing_failed`), not that its requests wait for the next pass."""
    last_start = START + timedelta(seconds=300 - 3 * 30)
    vertex = PagedJobs([], list_error=ServiceUnavailable("busy"))
    log = CapturedLog()
    vertex_pass = a_pass(vertex, log, at=last_start)
    name = f"projects/p/locations/{LOCATION}/customJobs/1"

    assert vertex_pass.job_service(LOCATION).get_custom_job(name=name).name == name

    assert vertex.gets == [name]
    assert [line["location"] for line in log.events("reconcile_listing_failed")] == [LOCATION]
    assert log.events("reconcile_listing_deferred") == []
