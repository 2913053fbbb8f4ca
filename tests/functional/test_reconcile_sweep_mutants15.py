"""A reconcile pass over a stalling region at edges the fifteenth mutation pass found: a location
whose sweep listing the pass defers (its region stalled earlier in the pass) stops no other
location's sweep, and a request whose own call ran out its timeout is no place to resume at."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.clock import utcnow
from shared.ledger.store import LedgerStore
from shared.reconcile import run_reconcile
from sim.gcs import MemoryStorage
from tests.support.decisions import CapturedLog, FakePublisher, World, make_settings
from tests.support.stalled_vertex import PassClock, StalledVertex

RUNNING = 3
STALLED, HEALTHY = "europe-west4", "us-central1"  # the sweep lists them in this order


@pytest.fixture
def clock() -> PassClock:
    return PassClock()


@pytest.fixture
def world(clock: PassClock) -> World:
    bucket = MemoryStorage(clock=utcnow).client().bucket("reconcile-sweep-state")
    settings = make_settings(bucket.name, SPOTJOBS_RECONCILE_TIMEOUT_SECONDS="300")
    settings = replace(settings, allowed_locations=(HEALTHY, STALLED))
    return World(LedgerStore(bucket), StalledVertex(clock, {STALLED}), FakePublisher(), settings)


def test_a_stalled_locations_deferred_sweep_listing_leaves_the_next_locations_strays_cancelled(
    world: World, clock: PassClock
) -> None:
    world.submitted("req-stalled", state=RUNNING, location=STALLED)  # its read stalls the region
    world.submitted("req-healthy", state=RUNNING, location=HEALTHY)
    stray = world.vertex.add("req-healthy", 2, location=HEALTHY, state=RUNNING)  # no attempt 2 was claimed
    log = CapturedLog()

    summary = run_reconcile(replace(world.ports, clock=clock), log.logger)

    assert summary.vertex["stalled_locations"] == [STALLED]
    assert [line["location"] for line in log.events("stray_listing_deferred")] == [STALLED]
    assert stray in world.vertex.cancelled


def test_a_request_whose_own_call_ran_out_its_timeout_is_no_place_for_the_next_pass_to_start(
    world: World, clock: PassClock
) -> None:
    """Its region stalled after the listing answered, so the request's own cancel waited out its
    timeout (DeadlineExceeded, not the window's refusal): deferred for its region, as one the window
    refuses there is, the next pass does not start at it (it would stall there again, and the
    requests before it in the active index would never be read again)."""
    from shared.ledger.cancelling import cancel_request
    from shared.reconcile import RECONCILE_TASK

    world.vertex.stalled = set()
    world.submitted("req-stalled", state=RUNNING, location=STALLED)
    world.ledger.swap("req-stalled", lambda current: cancel_request(current, by="ana", reason=None, now=utcnow()))
    listing = world.vertex.list_custom_jobs

    def listing_then_stalling(request: dict, **kwargs: object) -> object:
        jobs = listing(request, **kwargs)
        world.vertex.stalled.add(STALLED)  # the region's API stalls just after this answer
        return jobs

    world.vertex.list_custom_jobs = listing_then_stalling  # type: ignore[method-assign]
    log = CapturedLog()

    summary = run_reconcile(replace(world.ports, clock=clock), log.logger)

    assert summary.outcomes == {"deferred": 1}
    assert len(log.events("reconcile_call_timed_out")) == 1
    assert world.ledger.cursor(RECONCILE_TASK) == ""  # the next pass starts at the index's first
