"""The stray sweep at edges the fifteenth mutation pass found: a location whose listing the pass
defers (its region stalled earlier in the pass) stops no other location's sweep; each is its own."""

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
