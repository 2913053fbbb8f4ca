"""Every Vertex call a reconcile pass sends is one its CRUD budget and call window judge
(shared/reconcile_vertex.py): the pass's client sends nothing else, a call that ran out its timeout
defers its request as a refused one does, and a stray's cancel the pass itself refused is a
deferral, said at INFO, where one Vertex refused or failed stays a WARNING (issue 43)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from shared.adapters.vertex import parent_path
from shared.clock import utcnow
from shared.ledger.cancelling import cancel_request
from shared.ledger.store import LedgerStore
from shared.log import Logger
from shared.reconcile import run_reconcile
from shared.reconcile_vertex import VertexPass
from sim.gcs import MemoryStorage
from tests.support.decisions import CapturedLog, FakePublisher, World, make_settings
from tests.support.stalled_vertex import PassClock, StalledVertex

RUNNING, SUCCEEDED = 3, 4
LOCATION = "us-central1"


@pytest.fixture
def clock() -> PassClock:
    return PassClock()


@pytest.fixture
def world(clock: PassClock) -> World:
    one_call_at_a_time = threading.Lock()  # the pass's threads call at once; each call is atomic

    def serve(_service: str, _operation: str, perform: Callable[[], Any]) -> Any:
        with one_call_at_a_time:
            return perform()

    bucket = MemoryStorage(clock=utcnow, io=serve).client().bucket("reconcile-pass-calls-state")
    return World(LedgerStore(bucket), StalledVertex(clock, set()), FakePublisher(), make_settings(bucket.name))


def on_pass_clock(world: World, clock: PassClock) -> Any:
    return replace(world.ports, clock=clock)


def test_a_pass_client_refuses_a_call_its_budget_and_window_do_not_judge(world: World) -> None:
    """A create (or any call the pass's client does not wrap) is not handed to Vertex past the
    budget and the window: the client has no such call, and nothing is sent."""
    client = VertexPass(world.ports, Logger(), started=utcnow()).job_service(LOCATION)

    with pytest.raises(AttributeError, match="create_custom_job"):
        client.create_custom_job(
            parent=parent_path(world.settings.project, LOCATION), custom_job={}, retry=None, timeout=30.0
        )

    assert world.vertex.creates == 0
    assert not hasattr(client, "delete_custom_job")


def stall_after_the_listing(world: World) -> None:
    """The location's API stalls just after the pass's listing answered: the next call there hangs."""
    listing = world.vertex.list_custom_jobs

    def listing_then_stalling(request: dict[str, Any], **kwargs: Any) -> Any:
        jobs = listing(request, **kwargs)
        world.vertex.stalled.add(LOCATION)
        return jobs

    world.vertex.list_custom_jobs = listing_then_stalling  # type: ignore[method-assign]


def needs_a_get(world: World, request_id: str) -> None:
    _, job = world.submitted(request_id, state=RUNNING)
    world.vertex.set_state(job, SUCCEEDED)  # ended: not in the listing of unfinished jobs


def needs_its_cancel(world: World, request_id: str) -> None:
    world.submitted(request_id, state=RUNNING)  # in the listing: its read costs no call
    world.ledger.swap(request_id, lambda current: cancel_request(current, by="ana", reason=None, now=utcnow()))


@pytest.mark.parametrize("needs", [needs_a_get, needs_its_cancel], ids=["get", "cancel"])
def test_a_request_whose_own_call_runs_out_its_timeout_is_deferred_like_the_ones_refused_after_it(
    world: World, clock: PassClock, needs: Callable[[World, str], None]
) -> None:
    """Its get or its cancel hangs: the request waits for the next pass, as every later one in the
    location the window then refuses; it is not an error of the request."""
    for k in range(3):
        needs(world, f"req-{k}")
    stall_after_the_listing(world)
    log = CapturedLog()

    summary = run_reconcile(on_pass_clock(world, clock), log.logger)

    assert 1 <= world.vertex.hung_calls and summary.vertex["stalled_locations"] == [LOCATION]
    assert summary.outcomes == {"deferred": 3}
    assert log.events("reconcile_error") == []
    timed_out = log.events("reconcile_call_timed_out")
    assert len(timed_out) == world.vertex.hung_calls
    assert {line["severity"] for line in timed_out} == {"WARNING"}
    assert all("DeadlineExceeded" in line["error"] for line in timed_out)


def a_stray(world: World) -> str:
    """A request whose job runs, and a second job of it someone re-ran in the console."""
    world.submitted("req-1", state=RUNNING)
    return world.vertex.add("req-1", 1, LOCATION, state=RUNNING)


def spend_the_budget(world: World, clock: PassClock) -> None:
    """A budget of one call a minute: the pass's listing takes it."""
    world.settings = replace(world.settings, reconcile_crud_share=1 / world.settings.vertex_crud_per_minute)


def run_out_the_window(world: World, clock: PassClock) -> None:
    """The sweep's read of the stray's record answers, then the function's timeout is near: no
    call starts after it."""
    read = world.ledger.read

    def read_then_late(request_id: str) -> Any:
        record = read(request_id)
        clock.wait(world.settings.reconcile_timeout_seconds)
        return record

    world.ledger.read = read_then_late  # type: ignore[method-assign]


def test_a_stray_cancel_the_window_refuses_is_said_deferred_at_info(world: World, clock: PassClock) -> None:
    stray = a_stray(world)
    run_out_the_window(world, clock)
    log = CapturedLog()

    run_reconcile(on_pass_clock(world, clock), log.logger)

    assert world.vertex.cancelled == []  # not sent: the next pass's listing finds it again
    assert log.events("stray_sweep_failed") == []
    [line] = log.events("stray_cancel_deferred")
    assert line["severity"] == "INFO" and line["request_id"] == "req-1"
    assert "CallDeferred" in line["error"]

    run_reconcile(world.ports, Logger())  # the next pass, with its time
    assert world.vertex.cancelled == [stray]


def test_a_stray_is_cancelled_though_the_listing_spent_the_budget(world: World, clock: PassClock) -> None:
    """The listing is made whatever the budget; a location whose unfinished jobs take as many
    pages as the budget's minute would spend it every pass, and a stray's cancel deferred by the
    budget would be deferred again by each next pass, for good (seeds 12482, 20719). The sweep's
    cancel is sent and counted past the budget, as the listing is: one per stray a pass."""
    stray = a_stray(world)
    spend_the_budget(world, clock)
    log = CapturedLog()

    run_reconcile(on_pass_clock(world, clock), log.logger)

    assert world.vertex.cancelled == [stray]
    assert log.events("stray_cancel_deferred") == []
    [summary] = log.events("reconcile_summary")
    assert summary["vertex"]["calls"]["cancel"] == 1


@pytest.mark.parametrize("failure", ["ServiceUnavailable", "DeadlineExceeded"])
def test_a_stray_cancel_vertex_fails_stays_a_warning(world: World, clock: PassClock, failure: str) -> None:
    from google.api_core import exceptions

    a_stray(world)

    def failing(name: str, **_: Any) -> None:
        raise getattr(exceptions, failure)("no cancel")

    world.vertex.cancel_custom_job = failing  # type: ignore[method-assign]
    log = CapturedLog()

    run_reconcile(on_pass_clock(world, clock), log.logger)

    assert log.events("stray_cancel_deferred") == []
    [line] = log.events("stray_sweep_failed")
    assert line["severity"] == "WARNING" and failure in line["error"]


def test_a_strays_failure_is_said_before_another_strays_deferral() -> None:
    """A request's strays are each tried; of their failures the one raised (and logged) is the
    first Vertex's, not a deferral by the pass met before it, which would say it at INFO."""
    from google.api_core.exceptions import ServiceUnavailable

    from shared.found_jobs import _cancel_each
    from shared.reconcile_vertex import CrudBudgetSpent

    tried: list[str] = []

    def cancel(job: Any) -> None:
        tried.append(job)
        raise CrudBudgetSpent("spent") if job == "deferred" else ServiceUnavailable("busy")

    with pytest.raises(ServiceUnavailable):
        _cancel_each(["deferred", "failed", "deferred"], cancel)
    assert tried == ["deferred", "failed", "deferred"]
    with pytest.raises(CrudBudgetSpent):
        _cancel_each(["deferred"], cancel)


def test_a_sweep_listing_that_meets_a_503_is_sent_once_more_in_the_pass(world: World) -> None:
    """A location only the sweep lists (an allowed one no request of the pass ran in) whose listing
    meets a transient 503 is listed once more in the same pass, under its budget and window, as a
    location whose requests' listing failed is: its stray is cancelled now, not one interval later.
    A 429 is not sent again at once (the quota's own answer), nor a refusal for good."""
    from google.api_core.exceptions import PermissionDenied, ServiceUnavailable, TooManyRequests

    other = "europe-west4"
    world.settings = replace(world.settings, allowed_locations=(LOCATION, other))
    world.submitted("req-1", state=RUNNING, location=LOCATION)
    listing = world.vertex.list_custom_jobs
    failures: list[Exception] = []
    lists_sent: list[str] = []

    def failing_once(request: dict[str, Any], **kwargs: Any) -> Any:
        lists_sent.append(request["parent"])
        if other in request["parent"] and failures:
            raise failures.pop()
        return listing(request, **kwargs)

    world.vertex.list_custom_jobs = failing_once  # type: ignore[method-assign]
    for answer, second_list in ((ServiceUnavailable("busy"), True), (TooManyRequests("quota"), False)):
        stray = world.vertex.add("gone", 1, location=other)  # of a request with no record
        failures.append(answer)
        lists_sent.clear()

        run_reconcile(world.ports, Logger())

        assert sum(other in parent for parent in lists_sent) == (2 if second_list else 1)
        assert (stray in world.vertex.cancelled) is second_list
    failures.append(PermissionDenied("no"))
    lists_sent.clear()
    run_reconcile(world.ports, Logger())
    assert sum(other in parent for parent in lists_sent) == 1


def test_the_second_list_of_a_location_asks_for_the_pages_the_first_did(world: World) -> None:
    """The list sent once more after a 503 (`worth_a_second_list`) is the pass's listing asked
    again: the same filter and the same page size, so a location of many unfinished jobs costs it
    as few pages (CRUD calls of the budget) as the first would have."""
    from google.api_core.exceptions import ServiceUnavailable

    world.submitted("req-1", state=RUNNING, location=LOCATION)
    listing = world.vertex.list_custom_jobs
    sent: list[dict[str, Any]] = []

    def unavailable_once(request: dict[str, Any], **kwargs: Any) -> Any:
        sent.append(dict(request))
        if len(sent) == 1:
            raise ServiceUnavailable("busy")
        return listing(request, **kwargs)

    world.vertex.list_custom_jobs = unavailable_once  # type: ignore[method-assign]

    run_reconcile(world.ports, Logger())

    first, second = sent
    assert second == first
