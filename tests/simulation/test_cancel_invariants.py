"""The simulator's cancel invariants have teeth: each reports a violation planted in a world (no
handler runs), and leaves alone what the design allows."""

from __future__ import annotations

from datetime import timedelta

import pytest

from shared.clock import iso
from shared.ledger.records import Attempt, CancelIntent, RequestRecord
from shared.ledger.states import RequestStatus
from shared.ledger.store import LedgerStore
from sim import invariants
from sim.vertex import Create, SimJob
from sim.world import World


@pytest.fixture
def world() -> World:
    return World(0)


def cancelled_record(world: World, status: RequestStatus, *attempts: Attempt) -> str:
    at = iso(world.clock.now())
    ledger = LedgerStore(world.storage.client().bucket(world.settings.state_bucket))
    ledger.restore(
        RequestRecord(
            "r1", {"custom_job": {}}, "gs://c/", status=status, attempts=list(attempts), cancel=CancelIntent("ana", at)
        )
    )
    return at


def create(world: World, attempt: int, seconds_after_now: float) -> SimJob:
    labels = {"spotjobs-request-id": "r1", "spotjobs-attempt": str(attempt), "spotjobs-deployment": "sim"}
    moment = world.clock.now() + timedelta(seconds=seconds_after_now)
    name = f"projects/p/locations/us-central1/customJobs/{len(world.vertex.jobs) + 1}"
    job = SimJob(name, "us-central1", {"labels": labels}, labels, "JOB_STATE_QUEUED", moment, moment)
    world.vertex.jobs[name] = job
    world.vertex.created.append(Create(moment, "us-central1", {"labels": labels}, True))
    return job


def test_a_create_after_the_cancel_is_caught_unless_it_was_already_sent(world: World) -> None:
    sent = iso(world.clock.now() - timedelta(seconds=1))
    at = cancelled_record(
        world,
        RequestStatus.CLAIMED,
        Attempt(1, "us-central1", "SPOT", claimed_at=sent, create_sent_at=sent),
        Attempt(2, "us-central1", "SPOT", claimed_at=sent),
    )
    create(world, 1, seconds_after_now=5)  # in flight when the cancel landed: allowed
    assert invariants.nothing_created_after_a_cancel(world) == []
    create(world, 2, seconds_after_now=5)
    [found] = invariants.nothing_created_after_a_cancel(world)
    assert found.invariant == "nothing_created_after_a_cancel" and f"after its cancel at {at}" in found.detail


def test_a_cancelled_request_left_running_or_not_cancelled_is_caught(world: World) -> None:
    job = create(world, 1, seconds_after_now=0)
    cancelled_record(world, RequestStatus.RUNNING, Attempt(1, "us-central1", "SPOT", claimed_at="t", job=job.name))
    [found] = invariants.cancelled_requests_end_cancelled(world)
    assert "is RUNNING with 1 live jobs" in found.detail
    job.state = "JOB_STATE_CANCELLED"
    cancelled_record_ended = invariants.cancelled_requests_end_cancelled(world)
    assert [v.invariant for v in cancelled_record_ended] == ["cancelled_requests_end_cancelled"]  # still RUNNING
